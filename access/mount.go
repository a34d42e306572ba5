package access

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
)

// Mount makes the service the judge of srv's access tokens and serves
// GET and POST /api/tokens and DELETE /api/tokens/{id} to admins; /readyz
// reports whether the tokens are read.
func (s *Service) Mount(srv *admin.Server) {
	srv.Authenticate(s.Authenticate)
	srv.AddCheck("access", s.Ready)
	g := srv.API()
	g.GET("/tokens", s.list, admin.Admins...)
	g.POST("/tokens", s.create, admin.Admins...).Changes("token.create")
	g.DELETE("/tokens/:id", s.revoke, admin.Admins...).Changes("token.revoke")
}

// Created is the answer to POST /api/tokens: the token, with its secret
// (the only answer that shows it).
type Created struct {
	Token
	Secret string `json:"token"`
}

// CreateRequest is the body of POST /api/tokens.
type CreateRequest struct {
	Name string     `json:"name"`
	Role admin.Role `json:"role"`
	Team string     `json:"team,omitempty"`
	// Expires is how long the token works (a Go duration, 720h); empty:
	// until revoked.
	Expires string `json:"expires,omitempty"`
}

func (s *Service) list(c *echo.Context) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	out, err := s.List(ctx)
	if err != nil {
		return admin.Error(err)
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Service) create(c *echo.Context) error {
	var in CreateRequest
	if err := admin.DecodeJSONStrict(c, &in, 4<<10); err != nil {
		return err
	}
	var ttl time.Duration
	if in.Expires != "" {
		var err error
		if ttl, err = time.ParseDuration(in.Expires); err != nil || ttl <= 0 {
			return echo.NewHTTPError(http.StatusBadRequest, "expires: want a positive duration, e.g. 720h")
		}
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	t, secret, err := s.Create(ctx, Token{Name: in.Name, Role: in.Role, Team: in.Team}, ttl)
	admin.SetTarget(c, t.ID)
	if err != nil {
		return admin.Error(err)
	}
	return c.JSON(http.StatusCreated, Created{Token: t, Secret: secret})
}

func (s *Service) revoke(c *echo.Context) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	if err := s.Revoke(ctx, c.Param("id")); err != nil {
		return admin.Error(err)
	}
	return c.NoContent(http.StatusNoContent)
}
