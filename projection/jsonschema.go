package projection

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"time"
)

// JSONSchema describes the JSON that encoding/json makes of a Go type, as
// a JSON Schema (draft 2020-12, as OpenAPI 3.1 takes it): objects with
// their fields' JSON names (required unless omitempty or omitzero),
// integers, numbers, strings (a time a date-time, bytes base64), arrays,
// maps as objects. A pointer, slice or map may be null; a type with its own
// MarshalJSON, an interface, or a type met again inside itself is left
// open ({}).
func JSONSchema(t reflect.Type) map[string]any { return schemaOf(t, map[reflect.Type]bool{}) }

var (
	timeType          = reflect.TypeFor[time.Time]()
	jsonMarshaler     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

func schemaOf(t reflect.Type, inside map[reflect.Type]bool) map[string]any {
	if t == nil {
		return map[string]any{}
	}
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler):
		return map[string]any{}
	case t.Implements(textMarshalerType) || reflect.PointerTo(t).Implements(textMarshalerType):
		return map[string]any{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		s := schemaOf(t.Elem(), inside)
		if typ, ok := s["type"].(string); ok {
			s["type"] = []string{typ, "null"}
		}
		return s
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice:
		// A nil slice or map is written as null.
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": []string{"string", "null"}, "contentEncoding": "base64"}
		}
		return map[string]any{"type": []string{"array", "null"}, "items": schemaOf(t.Elem(), inside)}
	case reflect.Array:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), inside)}
	case reflect.Map:
		return map[string]any{"type": []string{"object", "null"}, "additionalProperties": schemaOf(t.Elem(), inside)}
	case reflect.Struct:
		if inside[t] {
			return map[string]any{}
		}
		inside[t] = true
		defer delete(inside, t)
		props := map[string]any{}
		var required []string
		addFields(t, props, &required, inside)
		s := map[string]any{"type": "object", "properties": props}
		if len(required) > 0 {
			s["required"] = required
		}
		return s
	}
	return map[string]any{}
}

// addFields adds a struct's fields as encoding/json names them, those of
// embedded structs without a name of their own inlined.
func addFields(t reflect.Type, props map[string]any, required *[]string, inside map[reflect.Type]bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(ft, props, required, inside)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s := schemaOf(ft, inside)
		if hasOpt(opts, "string") {
			s = map[string]any{"type": "string"}
		}
		props[name] = s
		if !hasOpt(opts, "omitempty") && !hasOpt(opts, "omitzero") {
			*required = append(*required, name)
		}
	}
}

func hasOpt(opts, name string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == name {
			return true
		}
	}
	return false
}

// jsonType is the JSON type a schema gives, for a short description.
func jsonType(s map[string]any) string {
	switch t := s["type"].(type) {
	case string:
		return t
	case []string:
		return strings.Join(t, " or ")
	}
	return "any"
}
