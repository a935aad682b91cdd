package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/httpapi"
)

// serve serves a service's API h on ln beside its app, which runs until
// stop is called and then reports on appDone, until ctx is done or either
// fails. Once the app is ready it calls ready, which may hold the service
// back (the store waits for its catalog); an error from it stops
// everything. It closes the API, its server and the app before it
// returns.
func serve(ctx context.Context, app *engine.App, appDone <-chan error, stop context.CancelFunc, h *httpapi.Handler, ln net.Listener, addr string, ready func() error) error {
	srv := httpapi.NewServer(addr, h)
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Serve(ln) }()
	var err error
	select {
	case <-app.Ready():
		if err = ready(); err != nil {
			break
		}
		select {
		case <-ctx.Done():
		case err = <-appDone:
		case err = <-srvDone:
		}
	case err = <-appDone:
	case <-ctx.Done():
	}
	h.Close()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	stop()
	if cerr := app.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
