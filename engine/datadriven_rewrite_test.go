package engine_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var dslRewriteFlag = flag.Bool("rewrite", false,
	"TestDSL: rewrite the expected lines in testdata/dsl/*.txt with what the nocache mode gives (bug and cache-bug cases: describe only)")

// dslOutputs are the commands whose indented lines -rewrite rewrites.
var dslOutputs = []string{"expect", "store", "skipped", "log", "describe", "build-error", "pipe-error"}

// dslRewrite returns the file data with the indented lines of the commands
// in bodies (by the line number of the command) replaced by the ones given.
// Everything else stays as it is, byte for byte: comments, blank lines,
// command lines and their order, and the lines of a command whose new
// lines equal its old ones (as the parser reads them). The new lines go
// where the first old one was, or right after the command, indented by
// two spaces; describe's lines keep their own indentation after that.
func dslRewrite(file, data string, bodies map[int][]string) (string, error) {
	cases, err := parseDSLCases(file, data)
	if err != nil {
		return "", err
	}
	lines := strings.Split(data, "\n")
	drop := map[int]bool{}        // line index -> dropped
	after := map[int][]string{}   // line index -> new lines after it
	instead := map[int][]string{} // line index -> new lines in its place
	for _, c := range cases {
		for _, cmd := range c.cmds {
			body, ok := bodies[cmd.line]
			if !ok || slices.Equal(body, cmd.body) {
				continue
			}
			indented := make([]string, len(body))
			for i, l := range body {
				indented[i] = "  " + l
			}
			for _, i := range cmd.bodyAt {
				drop[i] = true
			}
			if len(cmd.bodyAt) > 0 {
				instead[cmd.bodyAt[0]] = indented
			} else {
				after[cmd.line-1] = indented
			}
		}
	}
	out := make([]string, 0, len(lines))
	for i, l := range lines {
		switch {
		case instead[i] != nil:
			out = append(out, instead[i]...)
		case !drop[i]:
			out = append(out, l)
		}
		out = append(out, after[i]...)
	}
	return strings.Join(out, "\n"), nil
}

// dslRewriteFile writes a file of cases with the new lines of its
// commands, if they change it.
func dslRewriteFile(t *testing.T, file string, bodies map[int][]string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out, err := dslRewrite(file, string(data), bodies)
	if err != nil {
		t.Fatal(err)
	}
	if out == string(data) {
		return
	}
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote %s", file)
}

// The rewriter keeps every file of cases as it is when nothing changed,
// and writes back the same bytes when the expected lines go and come back:
// it drops no comment, blank line or command, reorders nothing, and the
// files are in the form it writes (two spaces before each expected line,
// one between tokens).
func TestDSLRewriteKeepsFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/dsl/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no files in testdata/dsl: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		cases, err := parseDSLCases(file, string(data))
		if err != nil {
			t.Fatal(err)
		}
		// Each command with expected lines, its lines, and the same with one more.
		cmds := dslOutputCommands(cases)
		if len(cmds) == 0 {
			t.Errorf("%s: no command with expected lines", file)
			continue
		}
		same, changed := map[int][]string{}, map[int][]string{}
		for _, cmd := range cmds {
			same[cmd.line] = cmd.body
			changed[cmd.line] = append(slices.Clone(cmd.body), "rewritten")
		}
		got, err := dslRewrite(file, string(data), same)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(data) {
			t.Errorf("%s: a rewrite with the same lines changes the file:\n%s", file, dslFirstDiff(string(data), got))
			continue
		}

		mod, err := dslRewrite(file, string(data), changed)
		if err != nil {
			t.Fatal(err)
		}
		modCases, err := parseDSLCases(file, mod)
		if err != nil {
			t.Fatalf("%s rewritten: %v", file, err)
		}
		modCmds := dslOutputCommands(modCases)
		if len(modCmds) != len(cmds) {
			t.Errorf("%s: %d commands with expected lines after a rewrite, want %d", file, len(modCmds), len(cmds))
			continue
		}
		back := map[int][]string{}
		for i, cmd := range modCmds {
			if want := changed[cmds[i].line]; !slices.Equal(cmd.args, cmds[i].args) || !slices.Equal(cmd.body, want) {
				t.Errorf("%s: rewritten, the command of line %d (%s) is %q with lines %q, want %q", file, cmds[i].line, cmds[i].args[0], cmd.args, cmd.body, want)
			}
			back[cmd.line] = cmds[i].body
		}
		got, err = dslRewrite(file, mod, back)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(data) {
			t.Errorf("%s: the expected lines rewritten and rewritten back change the file:\n%s", file, dslFirstDiff(string(data), got))
		}
	}
}

// dslFirstDiff shows where two files first differ: a few lines of each
// from the line before.
func dslFirstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	from := max(i-1, 0)
	window := func(lines []string) string {
		return strings.Join(lines[min(from, len(lines)):min(i+4, len(lines))], "\n  ")
	}
	return fmt.Sprintf("from line %d, want:\n  %s\ngot:\n  %s", from+1, window(w), window(g))
}

// dslOutputCommands lists the commands of the cases whose expected lines
// -rewrite rewrites, in order.
func dslOutputCommands(cases []dslCase) []dslCommand {
	var cmds []dslCommand
	for _, c := range cases {
		for _, cmd := range c.cmds {
			if slices.Contains(dslOutputs, cmd.args[0]) {
				cmds = append(cmds, cmd)
			}
		}
	}
	return cmds
}

// -rewrite writes what the nocache mode gives in place of stale lines,
// where they were, and leaves comments and blank lines where they are; in
// a case marked as a bug (or a cache bug) it rewrites describe's lines
// only. Rewriting again changes nothing.
func TestDSLRewriteStale(t *testing.T) {
	describe := func(name string) string {
		top, err := dslBuild(dslTopologies[name], "", func(string, ...any) {})
		if err != nil {
			t.Fatal(err)
		}
		return "  " + strings.Join(dslDescribe(top, ""), "\n  ") + "\n"
	}
	const suppress = `pipe in a 1 @0
pipe in a 2 @4
pipe in c 7 @10
expect out
  a 2 @4
`
	stale := `# Stale lines.
topology count
describe
  Topologies:
pipe in a 1 @1
# Between the pipes.
pipe in a 1 @2

expect out
  a 5 @1
# Between the expected lines.
  a 6 @2
store counts
  a 5 @1
  b 1 @1

# A bug: its lines stay.
topology count
bug the expected lines are wrong on purpose
describe
pipe in a 1 @1
expect out
  a 7 @1

topology suppress
cache-bug the record cache compacts the updates before they reach the buffer
describe
` + suppress
	want := `# Stale lines.
topology count
describe
` + describe("count") + `pipe in a 1 @1
# Between the pipes.
pipe in a 1 @2

expect out
  a 1 @1
  a 2 @2
# Between the expected lines.
store counts
  a 2 @2

# A bug: its lines stay.
topology count
bug the expected lines are wrong on purpose
describe
` + describe("count") + `pipe in a 1 @1
expect out
  a 7 @1

topology suppress
cache-bug the record cache compacts the updates before they reach the buffer
describe
` + describe("suppress") + suppress
	file := filepath.Join(t.TempDir(), "stale.txt")
	if err := os.WriteFile(file, []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, pass := range []string{"rewrite", "again"} {
		t.Run(pass, func(t *testing.T) { runDSLFile(t, file, true) })
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("%s: the file (-want +got):\n%s", pass, dslDiff(strings.Split(want, "\n"), strings.Split(string(got), "\n")))
		}
	}
}
