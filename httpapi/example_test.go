package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/projection"
)

// running is the test driver standing in for a running instance.
type running struct{ *enginetest.Driver }

func (running) State() engine.AppState { return engine.AppRunning }
func (running) ID() string             { return "example" }

// A view of a table served over HTTP.
func Example() {
	b := engine.NewBuilder()
	engine.NewTable(b, "stock", serde.String, serde.Int64, engine.Materialized("stock"))
	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := enginetest.Start(topology)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	in := enginetest.NewInput(d, "stock", serde.String, serde.Int64)
	in.Pipe("red", 3, enginetest.At(1))
	in.Pipe("blue", 5, enginetest.At(2))

	stock, err := projection.NewKeyValue("stock", "stock", serde.String, serde.Int64)
	if err != nil {
		fmt.Println(err)
		return
	}
	views, err := projection.NewRegistry(stock)
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := httpapi.New(httpapi.Config{Instance: running{d}, Views: views})
	if err != nil {
		fmt.Println(err)
		return
	}
	server := httptest.NewServer(h)
	defer server.Close()
	for _, path := range []string{"/views/stock/keys/red", "/views/stock/entries?limit=1", "/views/stock/keys/green"} {
		resp, err := http.Get(server.URL + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Print(resp.StatusCode, " ", string(body))
	}
	// Output:
	// 200 {"key":"red","value":3}
	// 200 {"entries":[{"key":"blue","value":5}],"next":"c3RvY2sAYmx1ZQ"}
	// 404 {"type":"about:blank","title":"no such key","status":404,"detail":"view stock has no key \"green\"","instance":"/views/stock/keys/green"}
}

// An API that knows its callers by their bearer tokens: a reader may read
// views, not see the instance's status; nobody else may do either.
func ExampleTokens() {
	b := engine.NewBuilder()
	engine.NewTable(b, "stock", serde.String, serde.Int64, engine.Materialized("stock"))
	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := enginetest.Start(topology)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	enginetest.NewInput(d, "stock", serde.String, serde.Int64).Pipe("red", 3, enginetest.At(1))
	stock, _ := projection.NewKeyValue("stock", "stock", serde.String, serde.Int64)
	views, _ := projection.NewRegistry(stock)

	h, err := httpapi.New(httpapi.Config{Instance: running{d}, Views: views,
		Authenticator: httpapi.Tokens(map[string]httpapi.Identity{
			"reader-token": {Subject: "dashboard", Permissions: []httpapi.Permission{httpapi.ReadViews}},
		})})
	if err != nil {
		fmt.Println(err)
		return
	}
	server := httptest.NewServer(h)
	defer server.Close()
	for _, c := range []struct{ path, token string }{
		{"/views/stock/keys/red", ""},
		{"/views/stock/keys/red", "reader-token"},
		{"/status", "reader-token"},
		{"/healthz", ""},
	} {
		req, _ := http.NewRequest(http.MethodGet, server.URL+c.path, nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Print(resp.StatusCode, " ", string(body))
	}
	// Output:
	// 401 {"type":"about:blank","title":"unauthorized","status":401,"detail":"send credentials: Authorization: Bearer <token>","instance":"/views/stock/keys/red"}
	// 200 {"key":"red","value":3}
	// 403 {"type":"about:blank","title":"forbidden","status":403,"detail":"GET /status needs permission \"operate\", which \"dashboard\" does not have","instance":"/status"}
	// 200 {"status":"ok"}
}
