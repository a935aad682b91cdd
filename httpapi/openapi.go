package httpapi

import (
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/oxbow-dev/oxbow/projection"
)

// openAPI is the API's OpenAPI 3.1 document, with the served views' names
// in the {view} parameter.
func (a *api) openAPI() map[string]any {
	ref := func(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }
	jsonBody := func(desc string, schema any) map[string]any {
		return map[string]any{"description": desc, "content": map[string]any{"application/json": map[string]any{"schema": schema}}}
	}
	problem := map[string]any{"description": "an error", "content": map[string]any{"application/problem+json": map[string]any{"schema": ref("Problem")}}}
	param := func(name, in, desc string, required bool, schema map[string]any) map[string]any {
		return map[string]any{"name": name, "in": in, "description": desc, "required": required, "schema": schema}
	}
	str, num := map[string]any{"type": "string"}, map[string]any{"type": "integer", "minimum": 0}
	// Each route takes the views it can answer: a key read a key-value
	// view's, a windowed fetch a windowed view's.
	var names, keyed, windowed []string
	for _, v := range a.cfg.Views.Views() {
		names = append(names, v.Name())
		if v.Kind() == projection.KeyValue {
			keyed = append(keyed, v.Name())
		} else {
			windowed = append(windowed, v.Name())
		}
	}
	// oneOf is a string among names; an enum may not be empty (a service
	// with no views or no commands), so none then.
	oneOf := func(names []string) map[string]any {
		if len(names) == 0 {
			return map[string]any{"type": "string"}
		}
		return map[string]any{"type": "string", "enum": names}
	}
	view := param("view", "path", "a view's name", true, oneOf(names))
	keyedView := param("view", "path", "a key-value view's name", true, oneOf(keyed))
	windowedView := param("view", "path", "a windowed view's name", true, oneOf(windowed))
	minPos := param("minPosition", "query", "<topic>:<partition>:<offset> the answer must reflect (repeatable)", false,
		map[string]any{"type": "string", "pattern": "^.+:[0-9]+:[0-9]+$"})
	limit := map[string]any{"type": "integer", "minimum": 1, "maximum": a.cfg.MaxLimit, "default": a.cfg.DefaultLimit}
	get := func(summary string, ok map[string]any, params ...map[string]any) map[string]any {
		op := map[string]any{"summary": summary, "responses": map[string]any{"200": ok, "default": problem}}
		if len(params) > 0 {
			op["parameters"] = params
		}
		return map[string]any{"get": op}
	}
	obj := func(props map[string]any) map[string]any {
		return map[string]any{"type": "object", "properties": props}
	}
	paths := map[string]any{
		"/": get("the API's entry points (a browser asking for HTML goes to the console, when it is served)", jsonBody("the links", obj(map[string]any{
			"links": map[string]any{"type": "object", "additionalProperties": str}}))),
		"/healthz": get("the process answers (503 once its instance failed)", jsonBody("ok", map[string]any{"type": "object"})),
		"/readyz":  get("ready while the instance runs", jsonBody("ready", map[string]any{"type": "object"})),
		"/status": get("the instance's state, tasks, lag and positions", jsonBody("the status", ref("Status")),
			param("instance", "query", "another member of the group, whose status it answers", false, str)),
		"/lag": get("the instance's lag on its input partitions, measured every 5 s over the last Config.LagHistory (15 minutes), oldest first",
			jsonBody("the lag's history", obj(map[string]any{"instance": str, "intervalSeconds": map[string]any{"type": "number"},
				"samples": map[string]any{"type": "array", "items": obj(map[string]any{"t": str, "positions": map[string]any{"type": "object"}, "lag": map[string]any{"type": "object"}})}})),
			param("instance", "query", "another member of the group, whose history it answers", false, str)),
		"/deadletters": get("the latest records of the instance's dead-letter topic, newest first", jsonBody("the dead letters", obj(map[string]any{"topic": str,
			"records": map[string]any{"type": "array", "items": obj(map[string]any{"partition": num, "offset": num, "timestamp": str, "key": str, "value": str,
				"headers": map[string]any{"type": "object", "additionalProperties": str}})}})), param("limit", "query", "how many", false, limit)),
		"/topology": get("the topology's description", map[string]any{"description": "as Describe prints it, or as its graph (Accept: application/json, or ?format=json)", "content": map[string]any{
			"text/plain": map[string]any{"schema": str}, "application/json": map[string]any{"schema": map[string]any{"type": "object"}}}},
			param("format", "query", "json: the graph", false, map[string]any{"type": "string", "enum": []string{"json"}})),
		"/openapi.json": get("this document", jsonBody("OpenAPI 3.1", map[string]any{"type": "object"})),
		"/views":        get("the views", jsonBody("the views", map[string]any{"type": "object", "properties": map[string]any{"views": map[string]any{"type": "array", "items": ref("View")}}})),
		"/views/{view}": get("a view", jsonBody("the view", ref("View")), view),
		"/views/{view}/keys/{key}": get("a key's entry", jsonBody("the entry", ref("Entry")), keyedView,
			param("key", "path", "the key, as text (a number, or JSON, for other key types)", true, str), minPos,
			param("maxLag", "query", "let standby replicas at most this many changelog records behind answer", false, num)),
		"/views/{view}/keys/{key}/windows": get("a key's windows (windowed views)", jsonBody("the windows", map[string]any{"type": "object",
			"properties": map[string]any{"key": str, "windows": map[string]any{"type": "array", "items": map[string]any{"oneOf": []any{ref("Window"), ref("CountWindow")}}}}}), windowedView,
			param("key", "path", "the key", true, str), param("from", "query", "the earliest window start (RFC 3339 or Unix ms; time-windowed views)", false, str),
			param("to", "query", "the latest window start (RFC 3339 or Unix ms; time-windowed views)", false, str), minPos),
		"/views/{view}/entries": get("a page of entries in this instance's partitions", jsonBody("the page", ref("Page")), view,
			param("from", "query", "the first key", false, str), param("to", "query", "the key after the last", false, str),
			param("prefix", "query", "keys that start with it (text keys)", false, str), param("limit", "query", "entries per page", false, limit),
			param("cursor", "query", "the next of the page before", false, str), minPos),
		"/views/{view}/changes": get("the view's changes, as server-sent events", map[string]any{"description": "event: change, data: a Change, id: the position to resume from",
			"content": map[string]any{"text/event-stream": map[string]any{"schema": ref("Change")}}}, view,
			param("key", "query", "one key's changes", false, str), param("from", "query", "resume after this event id", false, str),
			param("Last-Event-ID", "header", "resume after this event id", false, str)),
		"/aggregates/{aggregate}/{id}/commands": map[string]any{"post": map[string]any{
			"summary": "submit a command and wait for its outcome",
			"parameters": []map[string]any{
				param("aggregate", "path", "the aggregate's name", true, oneOf(slices.Sorted(maps.Keys(a.cfg.Commands)))),
				param("id", "path", "the aggregate's id", true, str),
				param("Idempotency-Key", "header", "the command's id, the aggregate's for its outcome retention (a day by default): the same request again gets the first outcome; another body or If-Match with it, 422", false, str),
				param("If-Match", "header", "the version the command expects", false, str),
			},
			"requestBody": map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": ref("Command")}}},
			"responses": map[string]any{
				"200":     jsonBody("accepted", ref("Outcome")),
				"409":     jsonBody("a version conflict", ref("Outcome")),
				"422":     jsonBody("rejected", ref("Outcome")),
				"default": problem,
			},
		}},
	}
	if a.cfg.versioned {
		paths["/versions"] = get("the versions of the application (this instance's, and with a control topic the others registered), and the active one", jsonBody("the versions", map[string]any{"type": "object",
			"properties": map[string]any{"active": str, "rollbackTo": str, "versions": map[string]any{"type": "array", "items": map[string]any{"type": "object",
				"properties": map[string]any{"version": str, "state": str, "here": map[string]any{"type": "boolean"}, "active": map[string]any{"type": "boolean"}, "lagError": str,
					"lag": obj(map[string]any{"group": str, "total": num, "progress": map[string]any{"type": "number"}, "caughtUp": map[string]any{"type": "boolean"}, "members": num,
						"partitions": map[string]any{"type": "array", "items": obj(map[string]any{"topic": str, "partition": num, "committed": map[string]any{"type": "integer"},
							"start": num, "end": num, "lag": num})}})}}}}}))
	}
	if a.cfg.Console {
		paths["/console"] = map[string]any{"get": map[string]any{"summary": "the web console: a redirect to /console/",
			"responses": map[string]any{"301": map[string]any{"description": "to /console/", "headers": map[string]any{"Location": map[string]any{"schema": str}}}}}}
		paths["/console/{file}"] = get("the web console's files (its page, script and style)", map[string]any{"description": "the file",
			"content": map[string]any{"text/html": map[string]any{"schema": str}, "text/javascript": map[string]any{"schema": str}, "text/css": map[string]any{"schema": str}}},
			param("file", "path", "the file; empty: the page", true, str))
	}
	if a.cfg.Metrics != nil {
		paths["/metrics"] = get("metrics in Prometheus' format", map[string]any{"description": "the metrics", "content": map[string]any{"text/plain": map[string]any{"schema": str}}})
	}
	position := obj(map[string]any{"topic": str, "partition": num, "offset": num})
	doc := map[string]any{
		"openapi": "3.1.0",
		"info":    map[string]any{"title": "Oxbow", "version": a.cfg.Version},
		"paths":   paths,
		"components": map[string]any{"schemas": map[string]any{
			"Problem": obj(map[string]any{"type": str, "title": str, "status": num, "detail": str, "instance": str}),
			"View": obj(map[string]any{"name": str, "kind": str, "store": str, "keyType": str, "valueType": str, "keySchema": map[string]any{"type": "object"},
				"valueSchema": map[string]any{"type": "object"}, "prefixScans": map[string]any{"type": "boolean"}}),
			"Entry":       obj(map[string]any{"key": map[string]any{}, "value": map[string]any{}}),
			"Window":      obj(map[string]any{"start": str, "end": str, "value": map[string]any{}}),
			"CountWindow": obj(map[string]any{"start": num, "end": num, "value": map[string]any{}}),
			"Page":        obj(map[string]any{"entries": map[string]any{"type": "array", "items": ref("Entry")}, "next": str}),
			"Change":      obj(map[string]any{"key": map[string]any{}, "value": map[string]any{}, "deleted": map[string]any{"type": "boolean"}}),
			"Status": obj(map[string]any{"instance": str, "state": str, "version": str, "tasks": map[string]any{"type": "array", "items": str}, "restoredRecords": num,
				"workers": num, "tags": map[string]any{"type": "object", "additionalProperties": str}, "deadLetterTopic": str,
				"instances":  map[string]any{"type": "array", "items": obj(map[string]any{"id": str, "addr": str, "tags": map[string]any{"type": "object", "additionalProperties": str}})},
				"nodes":      map[string]any{"type": "object", "additionalProperties": num},
				"restoring":  map[string]any{"type": "array", "items": obj(map[string]any{"task": str, "store": str, "restored": num, "remaining": num, "started": str})},
				"assignment": map[string]any{"type": "array", "items": obj(map[string]any{"task": str, "active": str, "standbys": map[string]any{"type": "array", "items": str}, "why": str})},
				"stalled":    str,
				"deciders": map[string]any{"type": "array", "items": obj(map[string]any{"aggregate": str, "group": str, "state": str, "stalled": str,
					"tasks": map[string]any{"type": "array", "items": str}, "positions": map[string]any{"type": "object"}, "lag": map[string]any{"type": "object"}})}}),
			"Command": a.commandSchema(),
			"Outcome": obj(map[string]any{"commandId": str, "aggregateId": str, "status": map[string]any{"type": "string", "enum": []string{"accepted", "rejected", "conflict"}},
				"version": num, "expectedVersion": num, "events": map[string]any{"type": "array", "items": position},
				"rejection": obj(map[string]any{"code": str, "message": str}), "duplicate": map[string]any{"type": "boolean"}, "request": str}),
		}},
	}
	if a.cfg.Authenticator != nil {
		a.secureOpenAPI(doc, problem)
	}
	return doc
}

// openPaths are the paths that no authenticator guards.
var openPaths = map[string]bool{"/": true, "/healthz": true, "/readyz": true, "/console": true, "/console/{file}": true}

// secureOpenAPI declares the bearer scheme the API takes, and the 401 and
// 403 answers of every route but the open ones. (Client certificates,
// where accepted, are the transport's.)
func (a *api) secureOpenAPI(doc, problem map[string]any) {
	doc["components"].(map[string]any)["securitySchemes"] = map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}
	doc["security"] = []any{map[string]any{"bearer": []string{}}}
	for path, item := range doc["paths"].(map[string]any) {
		for _, op := range item.(map[string]any) {
			op := op.(map[string]any)
			if openPaths[path] {
				op["security"] = []any{}
				continue
			}
			responses := op["responses"].(map[string]any)
			responses["401"] = map[string]any{"description": "no credentials, or refused ones", "content": problem["content"],
				"headers": map[string]any{"WWW-Authenticate": map[string]any{"schema": map[string]any{"type": "string"}}}}
			responses["403"] = map[string]any{"description": "the caller lacks the route's permission", "content": problem["content"]}
		}
	}
}

// commandTyped is a Submitter that can say its command types
// (*aggregate.Client).
type commandTyped interface {
	CommandTypes() map[string]reflect.Type
}

// commandSchema describes a command's envelope: for each command type of
// each aggregate that says its types, {"type": <its name>, "data": <the
// JSON of its Go type>}; an envelope of any type otherwise.
func (a *api) commandSchema() map[string]any {
	var variants []any
	for _, name := range slices.Sorted(maps.Keys(a.cfg.Commands)) {
		ct, ok := a.cfg.Commands[name].(commandTyped)
		if !ok {
			variants = nil
			break
		}
		types := ct.CommandTypes()
		for _, cmd := range slices.Sorted(maps.Keys(types)) {
			variants = append(variants, map[string]any{
				"title": name + " " + cmd, "type": "object", "required": []string{"type", "data"},
				"properties": map[string]any{
					"type":    map[string]any{"const": cmd},
					"version": map[string]any{"type": "integer", "minimum": 1},
					"data":    projection.JSONSchema(types[cmd]),
				},
			})
		}
	}
	if len(variants) == 0 {
		return map[string]any{"type": "object", "required": []string{"type"}, "properties": map[string]any{
			"type": map[string]any{"type": "string"}, "version": map[string]any{"type": "integer", "minimum": 1}, "data": map[string]any{"type": "object"}}}
	}
	return map[string]any{"oneOf": variants}
}

func (a *api) openAPIHandler(w http.ResponseWriter, _ *http.Request) {
	a.json(w, http.StatusOK, a.openAPI())
}

// Routes lists the API's routes, "<METHOD> <pattern>", sorted.
func (h *Handler) Routes() []string {
	if len(h.subs) > 0 {
		return slices.Sorted(slices.Values(append(append(h.subs[0].Routes(), "GET /versions"), h.versionRoutes...)))
	}
	var out []string
	_ = chi.Walk(h.Handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if route != "/" {
			route = strings.TrimSuffix(route, "/")
		}
		out = append(out, method+" "+route)
		return nil
	})
	slices.Sort(out)
	return slices.Compact(out)
}
