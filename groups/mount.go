package groups

import (
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
)

// Mount serves GET /api/groups, GET /api/groups/{group},
// POST /api/replay/plan and POST /api/replay/execute on srv.
func (s *Service) Mount(srv *admin.Server) {
	g := srv.API()
	g.GET("/groups", s.list, admin.Readers...)
	g.GET("/groups/:group", s.one, admin.Readers...)
	g.POST("/replay/plan", s.plan, admin.Readers...) // a dry run
	g.POST("/replay/execute", s.execute, admin.Operators...).Changes("replay.execute")
}

// ReplayRequest is the body of POST /api/replay/plan and
// /api/replay/execute.
type ReplayRequest struct {
	// Group is processor, retry, sub:<id> or a full group name.
	Group string `json:"group"`
	// Topic defaults to the group's own.
	Topic string `json:"topic,omitempty"`
	// Target is earliest, latest, time, duration or offsets, and Value
	// the time (RFC 3339), duration (90m) or partition:offset pairs
	// (0:15,3:200) of the last three (ParseTarget).
	Target string `json:"target"`
	Value  string `json:"value,omitempty"`
	// Partitions limits the replay to these partitions (none: all).
	Partitions []int32 `json:"partitions,omitempty"`
}

// maxRequest bounds a replay request's body.
const maxRequest = 64 << 10

func (s *Service) list(c *echo.Context) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	lags, err := s.Lags(ctx, "")
	if err != nil {
		return admin.Error(err)
	}
	// The list shows each group's totals; its partitions are one request
	// away.
	for i := range lags {
		lags[i].Partitions = nil
	}
	return c.JSON(http.StatusOK, lags)
}

func (s *Service) one(c *echo.Context) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	lags, err := s.Lags(ctx, c.Param("group"))
	if err != nil {
		return admin.Error(err)
	}
	return c.JSON(http.StatusOK, lags[0])
}

func (s *Service) plan(c *echo.Context) error { return s.replay(c, false) }

func (s *Service) execute(c *echo.Context) error { return s.replay(c, true) }

func (s *Service) replay(c *echo.Context, execute bool) error {
	var req ReplayRequest
	if err := admin.DecodeJSONStrict(c, &req, maxRequest); err != nil {
		return err
	}
	if req.Group == "" {
		return echo.NewHTTPError(http.StatusBadRequest, "group: required (processor, retry, sub:<id> or a full group name)")
	}
	admin.SetTarget(c, req.Group)
	t, err := ParseTarget(req.Target, req.Value)
	if err != nil {
		return admin.Error(err)
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	r, err := s.Replay(ctx, req.Group, req.Topic, req.Partitions, t, execute)
	if err != nil {
		return admin.Error(err)
	}
	return c.JSON(http.StatusOK, r)
}
