package admin_test

import (
	"testing"

	"github.com/hookstream/hookstream/subscriptions"
)

// TestSubscriptionLimit: at HOOKSTREAM_MAX_SUBSCRIPTIONS subscriptions a
// create is answered 409 naming the limit and writes nothing; a delete
// makes room again.
func TestSubscriptionLimit(t *testing.T) {
	h := newAPI(t)
	h.registry.Secure(subscriptions.Security{MaxSubscriptions: 2})
	bearer := "Bearer " + token
	var ids []string
	for range 2 {
		var created subscriptions.Subscription
		if status := h.call(t, "POST", "/api/subscriptions", bearer, map[string]any{"url": "http://127.0.0.1:1/"}, &created); status != 201 {
			t.Fatalf("create under the limit: got %d, want 201", status)
		}
		ids = append(ids, created.ID)
	}
	var refused map[string]string
	status := h.call(t, "POST", "/api/subscriptions", bearer, map[string]any{"url": "http://127.0.0.1:1/"}, &refused)
	if want := "subscription limit of 2 reached (HOOKSTREAM_MAX_SUBSCRIPTIONS); delete one first"; status != 409 || refused["error"] != want {
		t.Errorf("create at the limit: got %d %q, want 409 %q", status, refused["error"], want)
	}
	var listed []subscriptions.Subscription
	if status := h.call(t, "GET", "/api/subscriptions", bearer, nil, &listed); status != 200 || len(listed) != 2 {
		t.Errorf("list after the refused create: got %d with %d subscriptions, want 200 with 2", status, len(listed))
	}
	if status := h.call(t, "DELETE", "/api/subscriptions/"+ids[0], bearer, nil, nil); status != 204 {
		t.Fatalf("delete: got %d, want 204", status)
	}
	if status := h.call(t, "POST", "/api/subscriptions", bearer, map[string]any{"url": "http://127.0.0.1:1/"}, nil); status != 201 {
		t.Errorf("create after a delete: got %d, want 201", status)
	}
}
