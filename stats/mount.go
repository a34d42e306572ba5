package stats

import (
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// API serves /api/stats on the admin listener.
type API struct {
	// Stats follows the ingest, events and DLQ topics: the event counts.
	Stats *Tally
	// Attempts follows the delivery attempts: the delivery counts.
	Attempts *attempts.Tally
	// Registry names the subscriptions, whose groups' lag is shown.
	Registry *subscriptions.Registry
	// Rejected, when this process runs the ingest role, is its receiver's
	// rejected requests per source (ingest.Handler.Rejected).
	Rejected func() map[string]int64
	// Cluster answers lag queries.
	Cluster topics.Cluster
}

// Mount serves /api/stats on srv.
func (a API) Mount(srv *admin.Server) { srv.API().GET("/stats", a.stats) }

// statsView is what /api/stats answers: the deployment's events per source
// from the ingest, events and DLQ topics, its deliveries from the attempts
// topic, the requests this instance's receiver rejected, and group lag.
type statsView struct {
	Accepted       int64              `json:"accepted"`
	Duplicates     int64              `json:"duplicates"`
	Processed      int64              `json:"processed"`
	Failed         int64              `json:"failed"`
	Delivered      int64              `json:"delivered"`
	DeliveryFailed int64              `json:"delivery_failed"`
	Sources        map[string]*counts `json:"sources"`
	Lag            any                `json:"lag,omitempty"`
}

type counts struct {
	Accepted   int64 `json:"accepted"`
	Duplicates int64 `json:"duplicates"`
	Processed  int64 `json:"processed"`
	Failed     int64 `json:"failed"`
	Rejected   int64 `json:"rejected"`
}

func (a API) stats(c *echo.Context) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	if err := a.Attempts.CatchUp(ctx); err != nil {
		return admin.Error(err)
	}
	if err := a.Stats.CatchUp(ctx); err != nil {
		return admin.Error(err)
	}
	out := statsView{Sources: make(map[string]*counts)}
	source := func(name string) *counts {
		if out.Sources[name] == nil {
			out.Sources[name] = new(counts)
		}
		return out.Sources[name]
	}
	for name, n := range a.Stats.Sources() {
		out.Accepted += n.Accepted
		out.Duplicates += n.Duplicates()
		out.Processed += n.Processed
		out.Failed += n.Failed
		if name != "" { // records that name no source count in the totals only
			*source(name) = counts{Accepted: n.Accepted, Duplicates: n.Duplicates(), Processed: n.Processed, Failed: n.Failed}
		}
	}
	if a.Rejected != nil {
		for name, n := range a.Rejected() {
			source(name).Rejected = n
		}
	}
	deliveries := a.Attempts.Sum()
	out.Delivered, out.DeliveryFailed = deliveries.Delivered, deliveries.DeadLettered
	lag, err := groups.Lag(ctx, a.Cluster, "")
	if err != nil {
		return admin.Error(err)
	}
	subs, err := a.Registry.List(ctx)
	if err != nil {
		return admin.Error(err)
	}
	out.Lag = groups.WithoutDeleted(a.Cluster.Names, lag, subs)
	return c.JSON(http.StatusOK, out)
}
