package ingest

import "github.com/tidwall/gjson"

// gitlabUUIDHeader is GitLab's per-event UUID, canonical form of
// X-Gitlab-Event-UUID.
const gitlabUUIDHeader = "X-Gitlab-Event-Uuid"

// gitlabPath is a plain gjson path (checked by a test) of a GitLab payload,
// from the top or from object_attributes.
type gitlabPath struct {
	inAttrs bool
	path    string
}

// gitlabKeySpec is the content key of one GitLab object_kind: the prefix,
// then one value per part, each from the first of its alternative paths that
// yields one.
type gitlabKeySpec struct {
	prefix string
	parts  [][]gitlabPath
	// action appends object_attributes.action when the payload has it.
	action bool
}

var (
	glProjectID   = gitlabPath{path: "project_id"}
	glProjectObj  = gitlabPath{path: "project.id"}
	glAttrID      = gitlabPath{inAttrs: true, path: "id"}
	glAttrUpdated = gitlabPath{inAttrs: true, path: "updated_at"}
	glAttrAction  = gitlabPath{inAttrs: true, path: "action"}

	gitlabPush = gitlabKeySpec{prefix: "push", parts: [][]gitlabPath{
		{glProjectID, glProjectObj},
		{{path: "checkout_sha"}, {path: "after"}},
		{{path: "ref"}},
	}}
	gitlabMergeRequest = gitlabKeySpec{prefix: "mr", parts: [][]gitlabPath{
		{glProjectObj, {inAttrs: true, path: "target_project_id"}, glProjectID},
		{{inAttrs: true, path: "iid"}},
		{{inAttrs: true, path: "last_commit.id"}},
		{glAttrAction},
		{glAttrUpdated},
	}}
	gitlabNote = gitlabKeySpec{prefix: "note", parts: [][]gitlabPath{
		{glProjectID, glProjectObj}, {glAttrID}, {glAttrUpdated},
	}}
	gitlabEmoji = gitlabKeySpec{prefix: "emoji", action: true, parts: [][]gitlabPath{
		{glProjectID, glProjectObj}, {glAttrID}, {glAttrUpdated},
	}}
)

// gitlabDoc reads the fields of one GitLab payload. Fields of
// object_attributes are read inside that object, found once, rather than
// from the top of the body each time.
type gitlabDoc struct {
	root      string
	attrs     string
	attrsRead bool
}

// value reads gp by the JSON value rules; the result may alias the body.
func (d *gitlabDoc) value(gp gitlabPath) (string, bool) {
	doc := d.root
	if gp.inAttrs {
		if !d.attrsRead {
			d.attrsRead = true
			if r := gjson.Get(d.root, "object_attributes"); r.IsObject() {
				d.attrs = r.Raw
			}
		}
		doc = d.attrs
	}
	return jsonFieldText(gjson.Get(doc, gp.path))
}

// gitlabKey derives the id of preset:gitlab. Old GitLab versions send no
// delivery id that is stable across a redelivery, so the id is built from the
// content, by object_kind:
//
//	push, tag_push  push-{project_id}-{checkout_sha}-{ref}
//	merge_request   mr-{project.id}-{object_attributes.iid}-{object_attributes.last_commit.id}-{object_attributes.action}-{object_attributes.updated_at}
//	note            note-{project_id}-{object_attributes.id}-{object_attributes.updated_at}
//	emoji           emoji-{project_id}-{object_attributes.id}-{object_attributes.updated_at}[-{object_attributes.action}]
//
// Anything else, or a missing part, falls back to the X-Gitlab-Event-UUID
// header; the id is missing when that is absent too.
//
// Choices, checked against GitLab's documented payloads:
//   - project id: push, note and emoji payloads carry a top-level project_id;
//     merge_request payloads do not, and use project.id. Each falls back to
//     the other spelling (merge_request first to
//     object_attributes.target_project_id, the project the MR belongs to).
//   - push: checkout_sha is null when a branch or tag is deleted; the key
//     then uses after, which for a deletion is the all-zero sha, so a
//     deletion never collides with the creation of the same ref at the same
//     commit. Branch and tag pushes share the prefix; their refs differ
//     (refs/heads/ and refs/tags/).
//   - merge_request: action and last commit alone would merge distinct
//     events (two label edits are both "update" on the same commit; close,
//     reopen, close repeats "close"), dropping the later ones as duplicates.
//     object_attributes.updated_at, the same when GitLab redelivers an event,
//     tells them apart.
//   - emoji: object_attributes.id is the award id. A revoke carries the same
//     award id and updated_at as its award, so the action (award or revoke)
//     is appended when the payload has it; payloads from GitLab versions
//     without it keep the plain key.
func gitlabKey(p *Payload) (string, bool) {
	if p.JSON {
		if key, ok := gitlabContentKey(p.Body); ok {
			return key, true
		}
	}
	v := fieldHeaderValue(p.Header, gitlabUUIDHeader)
	return v, v != ""
}

// gitlabContentKey builds the content key of a GitLab payload; ok is false
// for other kinds or when a part is missing.
func gitlabContentKey(body []byte) (string, bool) {
	d := gitlabDoc{root: bodyString(body)}
	kind, _ := d.value(gitlabPath{path: "object_kind"})
	var spec *gitlabKeySpec
	switch kind {
	case "push", "tag_push":
		spec = &gitlabPush
	case "merge_request":
		spec = &gitlabMergeRequest
	case "note":
		spec = &gitlabNote
	case "emoji":
		spec = &gitlabEmoji
	default:
		return "", false
	}
	var buf [8]string
	vals := append(buf[:0], spec.prefix)
	for _, alts := range spec.parts {
		v, ok := d.first(alts)
		if !ok {
			return "", false
		}
		vals = append(vals, v)
	}
	if spec.action {
		if v, ok := d.value(glAttrAction); ok {
			vals = append(vals, v)
		}
	}
	return joinFieldValues(vals, "-"), true
}

// first returns the value of the first of paths that yields one.
func (d *gitlabDoc) first(paths []gitlabPath) (string, bool) {
	for _, gp := range paths {
		if v, ok := d.value(gp); ok {
			return v, true
		}
	}
	return "", false
}
