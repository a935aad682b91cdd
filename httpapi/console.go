package httpapi

import (
	"bytes"
	"embed"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// The web console (Config.Console): a page, its script and style,
// embedded, with no build step. Everything it shows it asks of the API.
//
//go:embed console
var consoleFiles embed.FS

// consoleHandler serves the console's files under /console/ (the page at
// /console/ itself); anything else under it is a 404 problem.
func consoleHandler() http.Handler {
	started := time.Now()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/console/")
		if name == "" {
			name = "index.html"
		}
		b, err := consoleFiles.ReadFile(path.Join("console", name))
		if err != nil || strings.Contains(name, "/") {
			problem(w, r, http.StatusNotFound, "no such file", fmt.Sprintf("the console has no file %q", name))
			return
		}
		// The files come with the binary: no stale copy outlives an
		// upgrade, and no other site may frame the page.
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("Content-Type", mime.TypeByExtension(path.Ext(name)))
		http.ServeContent(w, r, name, started, bytes.NewReader(b))
	})
}
