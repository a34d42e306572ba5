package stats

import (
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
)

// Mount serves GET /api/stats on srv: the Summary.
func (s *Service) Mount(srv *admin.Server) { srv.API().GET("/stats", s.stats, admin.Readers...) }

func (s *Service) stats(c *echo.Context) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	out, err := s.Summary(ctx)
	if err != nil {
		return admin.Error(err)
	}
	return c.JSON(http.StatusOK, out)
}
