package console

import "github.com/labstack/echo/v5"

// mountSubscriptions serves the subscription pages.
func (u *Console) mountSubscriptions(g *echo.Group) {}
