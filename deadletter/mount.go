package deadletter

import (
	"cmp"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
)

// Mount serves the service on srv's /api: GET /api/dlq lists letters,
// POST /api/dlq/redrive redrives a selection of them. A viewer reads
// letters redacted (Letter.Redacted); a team token reads and redrives the
// delivery letters of its team's subscriptions only (Filter.Team), and
// no processor letter.
func (s *Service) Mount(srv *admin.Server) {
	g := srv.API()
	g.GET("/dlq", s.listDLQ, admin.ReadersAndTeams...)
	g.POST("/dlq/redrive", s.redrive, admin.OperatorsAndTeams...).Changes("dlq.redrive")
}

// errTeamProcessor refuses a team token the processor DLQ.
var errTeamProcessor = echo.NewHTTPError(http.StatusForbidden, "the processor DLQ needs role admin or operator (viewer to read): a team token reads and redrives only the delivery DLQ's letters of its subscriptions; ask with kind delivery")

// dlqQuery is the selection of /api/dlq and /api/dlq/redrive.
type dlqQuery struct {
	Kind  string `json:"kind"`
	Since string `json:"since"`
	Key   string `json:"key"`
	Limit int    `json:"limit"`
	All   bool   `json:"all"`
}

// parse is the selection of q as who may make it.
func (q dlqQuery) parse(who admin.Identity) (Kind, Filter, error) {
	kind, err := ParseKind(cmp.Or(q.Kind, "processor"))
	if err != nil {
		return "", Filter{}, echo.NewHTTPError(http.StatusBadRequest, "kind: "+err.Error())
	}
	f := Filter{Key: q.Key, Limit: q.Limit}
	if who.Role == admin.Team {
		if kind != Delivery {
			return "", f, errTeamProcessor
		}
		f.Team = who.Team
	}
	if q.Limit < 0 || q.Limit > 10_000 {
		return "", f, echo.NewHTTPError(http.StatusBadRequest, "limit: want a number from 0 to 10000")
	}
	if q.Since != "" {
		t, err := time.Parse(time.RFC3339, q.Since)
		if err != nil {
			return "", f, echo.NewHTTPError(http.StatusBadRequest, "since: want an RFC 3339 time")
		}
		f.Since = t
	}
	return kind, f, nil
}

func (s *Service) listDLQ(c *echo.Context) error {
	limit, err := strconv.Atoi(c.QueryParamOr("limit", "100"))
	if err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "limit: want a number from 0 to 10000")
	}
	who := admin.Caller(c)
	kind, f, err := dlqQuery{Kind: c.QueryParam("kind"), Since: c.QueryParam("since"), Key: c.QueryParam("key"), Limit: limit}.parse(who)
	if err != nil {
		return err
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	letters, err := s.List(ctx, kind, f)
	if err != nil {
		return admin.Error(err)
	}
	if letters == nil {
		letters = []Letter{}
	}
	if !who.In(admin.OperatorsAndTeams) {
		for i, l := range letters {
			letters[i] = l.Redacted()
		}
	}
	return c.JSON(http.StatusOK, letters)
}

// redrive copies the selected letters back; a selection is required.
func (s *Service) redrive(c *echo.Context) error {
	var q dlqQuery
	if err := admin.DecodeJSON(c, &q, 4<<10); err != nil {
		return err
	}
	kind, f, err := q.parse(admin.Caller(c))
	if err != nil {
		return err
	}
	admin.SetTarget(c, string(kind))
	if !q.All && q.Since == "" && q.Key == "" {
		return echo.NewHTTPError(http.StatusBadRequest, "select letters with since, key, or all: true")
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	copied, skipped, err := s.Redrive(ctx, kind, f)
	if err != nil {
		return admin.Error(err)
	}
	return c.JSON(http.StatusOK, map[string]any{"redriven": copied, "skipped": skipped, "to": kind.Target(s.c.Names)})
}
