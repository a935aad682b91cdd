package httpapi

import (
	"embed"
	"io/fs"
	"net/http"
)

// The web console (Config.Console): a page and its script, embedded, with
// no build step. Everything it shows it asks of the API.
//
//go:embed console
var consoleFiles embed.FS

// consoleHandler serves the console's files under /console/.
func consoleHandler() http.Handler {
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err) // the embedded directory is part of the build
	}
	files := http.StripPrefix("/console/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The page and its script come with the binary: no stale copy
		// outlives an upgrade, and no other site may frame the page.
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		files.ServeHTTP(w, r)
	})
}
