package jsonexport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Schema is a JSON Schema (draft 2020-12) restricted to the keywords the
// gpuprof schema uses; ParseSchema rejects any other keyword so that a
// schema never silently relies on something this validator ignores.
type Schema struct {
	root map[string]any
	res  map[string]*regexp.Regexp
}

var keywords = map[string]bool{
	"$schema": true, "$id": true, "$defs": true, "$ref": true, "$comment": true, "title": true, "description": true,
	"type": true, "properties": true, "required": true, "additionalProperties": true, "items": true,
	"enum": true, "const": true, "minimum": true, "maximum": true, "pattern": true, "minItems": true,
	"maxItems": true, "examples": true,
}

// ParseSchema parses and checks a schema.
func ParseSchema(b []byte) (*Schema, error) {
	var root any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("schema: %v", err)
	}
	m, ok := root.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("schema: not an object")
	}
	s := &Schema{root: m, res: map[string]*regexp.Regexp{}}
	if err := s.check(m, "#"); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Schema) check(node map[string]any, at string) error {
	for k, v := range node {
		if !keywords[k] {
			return fmt.Errorf("schema %s: keyword %q is not supported by this validator", at, k)
		}
		sub := func(x any, where string) error {
			m, ok := x.(map[string]any)
			if !ok {
				return fmt.Errorf("schema %s: not a schema object", where)
			}
			return s.check(m, where)
		}
		switch k {
		case "properties", "$defs":
			props, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("schema %s/%s: not an object", at, k)
			}
			for name, p := range props {
				if err := sub(p, at+"/"+k+"/"+name); err != nil {
					return err
				}
			}
		case "items":
			if err := sub(v, at+"/items"); err != nil {
				return err
			}
		case "additionalProperties":
			if _, ok := v.(bool); !ok {
				if err := sub(v, at+"/additionalProperties"); err != nil {
					return err
				}
			}
		case "pattern":
			str, _ := v.(string)
			re, err := regexp.Compile(str)
			if err != nil {
				return fmt.Errorf("schema %s/pattern: %v", at, err)
			}
			s.res[str] = re
		case "$ref":
			ref, _ := v.(string)
			if s.resolve(ref) == nil {
				return fmt.Errorf("schema %s: $ref %q does not resolve", at, ref)
			}
		}
	}
	return nil
}

// resolve finds a local reference "#/$defs/name".
func (s *Schema) resolve(ref string) map[string]any {
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	if !ok {
		return nil
	}
	defs, _ := s.root["$defs"].(map[string]any)
	d, _ := defs[name].(map[string]any)
	return d
}

// ValidationError lists where a document breaks the schema.
type ValidationError struct{ Problems []string }

func (e *ValidationError) Error() string {
	const show = 10
	p := e.Problems
	more := ""
	if len(p) > show {
		more = fmt.Sprintf(" (and %d more)", len(p)-show)
		p = p[:show]
	}
	return "json: document does not match the schema: " + strings.Join(p, "; ") + more
}

// Validate checks a JSON document against the schema.
func (s *Schema) Validate(doc []byte) error {
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("json: %v", err)
	}
	if dec.More() {
		return fmt.Errorf("json: trailing data after the document")
	}
	var probs []string
	s.validate(v, s.root, "", &probs, 0)
	if len(probs) > 0 {
		return &ValidationError{Problems: probs}
	}
	return nil
}

func typeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return "integer"
		}
		if _, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "unknown"
}

func typeOK(actual string, want any) bool {
	match := func(t string) bool { return t == actual || (t == "number" && actual == "integer") }
	switch w := want.(type) {
	case string:
		return match(w)
	case []any:
		for _, t := range w {
			if ts, ok := t.(string); ok && match(ts) {
				return true
			}
		}
	}
	return false
}

// equal compares JSON values (numbers by value).
func equal(a, b any) bool {
	an, aok := a.(json.Number)
	bn, bok := b.(json.Number)
	if aok && bok {
		x, _, e1 := big.ParseFloat(string(an), 10, 200, big.ToNearestEven)
		y, _, e2 := big.ParseFloat(string(bn), 10, 200, big.ToNearestEven)
		return e1 == nil && e2 == nil && x.Cmp(y) == 0
	}
	ab, _ := json.Marshal(a)
	bb, _ := json.Marshal(b)
	return bytes.Equal(ab, bb)
}

func num(v any) (*big.Float, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return nil, false
	}
	f, _, err := big.ParseFloat(string(n), 10, 200, big.ToNearestEven)
	return f, err == nil
}

func (s *Schema) validate(v any, sch map[string]any, at string, probs *[]string, depth int) {
	if len(*probs) > 100 {
		return
	}
	bad := func(format string, a ...any) {
		where := at
		if where == "" {
			where = "/"
		}
		*probs = append(*probs, where+": "+fmt.Sprintf(format, a...))
	}
	if depth > 200 {
		bad("nesting too deep to check")
		return
	}
	if ref, ok := sch["$ref"].(string); ok {
		if d := s.resolve(ref); d != nil {
			s.validate(v, d, at, probs, depth+1)
		}
	}
	actual := typeOf(v)
	if t, ok := sch["type"]; ok && !typeOK(actual, t) {
		bad("%s, want %v", actual, t)
		return
	}
	if c, ok := sch["const"]; ok && !equal(v, c) {
		bad("%v, want %v", v, c)
	}
	if e, ok := sch["enum"].([]any); ok {
		found := false
		for _, x := range e {
			if equal(v, x) {
				found = true
			}
		}
		if !found {
			bad("%v is not one of %v", v, e)
		}
	}
	if x, ok := num(v); ok {
		if m, ok := num(sch["minimum"]); ok && x.Cmp(m) < 0 {
			bad("%v below the minimum %v", v, sch["minimum"])
		}
		if m, ok := num(sch["maximum"]); ok && x.Cmp(m) > 0 {
			bad("%v above the maximum %v", v, sch["maximum"])
		}
	}
	if str, ok := v.(string); ok {
		if p, ok := sch["pattern"].(string); ok && !s.res[p].MatchString(str) {
			bad("%q does not match %s", str, p)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := sch["properties"].(map[string]any)
		if req, ok := sch["required"].([]any); ok {
			for _, r := range req {
				if name, _ := r.(string); name != "" {
					if _, ok := x[name]; !ok {
						bad("missing required %q", name)
					}
				}
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			path := at + "/" + strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
			if ps, ok := props[k].(map[string]any); ok {
				s.validate(x[k], ps, path, probs, depth+1)
				continue
			}
			switch ap := sch["additionalProperties"].(type) {
			case bool:
				if !ap {
					bad("unexpected property %q", k)
				}
			case map[string]any:
				s.validate(x[k], ap, path, probs, depth+1)
			}
		}
	case []any:
		if m, ok := num(sch["minItems"]); ok {
			if n := big.NewFloat(float64(len(x))); n.Cmp(m) < 0 {
				bad("%d items, want at least %v", len(x), sch["minItems"])
			}
		}
		if m, ok := num(sch["maxItems"]); ok {
			if n := big.NewFloat(float64(len(x))); n.Cmp(m) > 0 {
				bad("%d items, want at most %v", len(x), sch["maxItems"])
			}
		}
		if it, ok := sch["items"].(map[string]any); ok {
			for i, e := range x {
				s.validate(e, it, at+"/"+strconv.Itoa(i), probs, depth+1)
			}
		}
	}
}
