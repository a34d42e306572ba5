package instances

import (
	"cmp"
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
)

// SelfOf is the instance whose admin listener srv is: the address it
// advertises, and its readiness.
func SelfOf(srv *admin.Server) *Self {
	cfg := srv.Config()
	return &Self{AdminAddr: cmp.Or(cfg.AdvertisedAddr, cfg.Addr), Readiness: srv.Readiness}
}

// Mount serves GET /api/instances on srv: Discover, asked by the instance
// whose listener srv is.
func (s *Service) Mount(srv *admin.Server) {
	self := SelfOf(srv)
	srv.API().GET("/instances", func(c *echo.Context) error {
		ctx, cancel := admin.Timeout(c)
		defer cancel()
		list, err := s.Discover(ctx, self)
		if err != nil {
			return admin.Error(err)
		}
		return c.JSON(http.StatusOK, list)
	}, admin.Readers...)
}
