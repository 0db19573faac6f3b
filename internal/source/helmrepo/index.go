// Package helmrepo reads Helm chart repositories served over HTTP: their
// index.yaml, parsed as a stream into what resolving a chart needs, with
// its memory bounded however large the index is.
package helmrepo

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrLimitExceeded marks an index past a bound: too large, a line or an
// entry too long, or a layout that cannot be streamed and is too large to
// parse whole.
var ErrLimitExceeded = errors.New("limit exceeded")

// ErrInvalidIndex marks an index that is not a Helm repository index.
var ErrInvalidIndex = errors.New("invalid index")

// ChartVersion is what is kept of one version of a chart in an index.
type ChartVersion struct {
	// Version is the chart's version (semver).
	Version string
	// URLs holds where the archive is, absolute or relative to the index:
	// the first URL the index lists, the one Helm downloads (the others
	// are dropped as the index is read).
	URLs []string
	// Digest is the sha256 of the archive in hex, "" when the index has
	// none.
	Digest string
}

// Index is a repository's index reduced to what resolving and pulling a
// chart need: everything else (descriptions, maintainers, icons) is
// dropped as it is read.
type Index struct {
	// Charts holds each chart's versions in the index's order.
	Charts map[string][]ChartVersion

	retained, maxRetained int64 // the estimate of RetainedBytes, and its bound while parsing (0: none)
}

// Heap each kept chart and version costs beyond its strings' bytes: a
// map entry and its slice header, or a ChartVersion (twice over, for
// append's spare capacity), its one-URL slice and three allocations'
// rounding. Measured against runtime.MemStats in index_test.go.
const (
	chartOverhead   = 96
	versionOverhead = 2*56 + 16 + 3*16
)

// RetainedBytes estimates the heap the index holds: what the budgets of
// parsing and of a Client's kept indexes count.
func (i *Index) RetainedBytes() int64 { return i.retained }

// addChart starts a chart's list of versions.
func (i *Index) addChart(name string) error {
	i.Charts[name] = nil
	return i.charge(chartOverhead + int64(len(name)))
}

// addVersion appends one version of chart, keeping its first URL.
func (i *Index) addVersion(chart string, e entry) error {
	v := ChartVersion{Version: e.Version, Digest: e.Digest}
	n := int64(versionOverhead + len(e.Version) + len(e.Digest))
	if len(e.URLs) > 0 {
		v.URLs = []string{e.URLs[0]}
		n += int64(len(e.URLs[0]))
	}
	i.Charts[chart] = append(i.Charts[chart], v)
	return i.charge(n)
}

func (i *Index) charge(n int64) error {
	i.retained += n
	if i.maxRetained > 0 && i.retained > i.maxRetained {
		return fmt.Errorf("%w: the index's versions would take more than %d bytes of memory", ErrLimitExceeded, i.maxRetained)
	}
	return nil
}

// Versions is how many chart versions the index holds.
func (i *Index) Versions() int {
	n := 0
	for _, versions := range i.Charts {
		n += len(versions)
	}
	return n
}

// IndexLimits bound reading one index.
type IndexLimits struct {
	// MaxBytes bounds the whole index.
	MaxBytes int64
	// MaxEntryBytes bounds one chart version's entry (and one line).
	MaxEntryBytes int
	// MaxWholeBytes bounds an index whose layout is not streamed (flow
	// style YAML) and so is parsed whole, at several times its size in
	// memory.
	MaxWholeBytes int64
	// MaxRetainedBytes bounds what the parsed index keeps (its
	// RetainedBytes), however small its entries: an index of a million
	// tiny versions keeps far more per byte than one helm writes.
	MaxRetainedBytes int64
}

// DefaultIndexLimits are generous for real repositories: the largest
// public indexes are some tens of MiB, and an entry a few KiB.
func DefaultIndexLimits() IndexLimits {
	return IndexLimits{MaxBytes: 256 << 20, MaxEntryBytes: 1 << 20, MaxWholeBytes: 8 << 20, MaxRetainedBytes: 64 << 20}
}

// entry is the part of a chart version's entry that is kept.
type entry struct {
	Version string   `yaml:"version" json:"version"`
	URLs    []string `yaml:"urls" json:"urls"`
	Digest  string   `yaml:"digest" json:"digest"`
}

// ParseIndex reads an index from r as a stream. The index helm writes
// (block YAML: entries, each chart's key, each version's "- " item) is cut
// into one entry at a time, each decoded by a YAML parser and dropped, so
// memory is the kept fields plus one entry, not a tree of the whole index.
// A JSON index is streamed token by token. Any other layout (flow style
// YAML) is parsed whole, up to MaxWholeBytes.
func ParseIndex(r io.Reader, limits IndexLimits) (*Index, error) {
	counted := &limitedReader{r: r, left: limits.MaxBytes}
	rec := &recorder{r: counted, max: limits.MaxWholeBytes}
	br := bufio.NewReaderSize(rec, 64<<10)
	first, err := firstByte(br)
	if err != nil {
		return nil, err
	}
	var index *Index
	if first == '{' {
		index, err = parseJSON(br, limits.MaxRetainedBytes)
	} else {
		index, err = parseBlock(br, limits)
	}
	if err != nil && !counted.exceeded && (errors.Is(err, errNotBlock) || first == '{' && errors.Is(err, ErrInvalidIndex)) {
		index, err = parseWhole(br, rec, err, limits.MaxRetainedBytes)
	}
	if counted.exceeded {
		return nil, fmt.Errorf("%w: the index is larger than %d bytes", ErrLimitExceeded, limits.MaxBytes)
	}
	if err != nil {
		return nil, err
	}
	return index, nil
}

// firstByte peeks at the first byte that is not white space or a BOM.
func firstByte(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.ReadByte()
		if err == io.EOF {
			return 0, fmt.Errorf("%w: the index is empty", ErrInvalidIndex)
		}
		if err != nil {
			return 0, err
		}
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		case 0xEF: // a UTF-8 BOM
			if _, err := br.Discard(2); err != nil {
				return 0, err
			}
			continue
		}
		return b, br.UnreadByte()
	}
}

// errNotBlock says the index is not in the block layout parseBlock cuts.
var errNotBlock = errors.New("not block YAML")

// parseBlock cuts the block YAML index into entries by indentation and
// decodes each with a YAML parser. It gives errNotBlock when entries, or a
// chart's versions, are not block collections.
func parseBlock(br *bufio.Reader, limits IndexLimits) (*Index, error) {
	index := &Index{Charts: map[string][]ChartVersion{}, maxRetained: limits.MaxRetainedBytes}
	const (
		top = iota
		inEntries
	)
	state := top
	var (
		chartIndent = -1 // the indentation of the charts' keys
		itemIndent  = -1 // the indentation of the current chart's "- "
		chart       string
		haveChart   bool
		item        []byte // the current version's entry, as its lines
		lineNo      int
		sawEntries  bool
	)
	flush := func() error {
		if len(item) == 0 {
			return nil
		}
		var decoded []entry
		if err := yaml.Unmarshal(item, &decoded); err != nil {
			return fmt.Errorf("%w: entries.%s[%d] (before line %d): %v", ErrInvalidIndex, chart, len(index.Charts[chart]), lineNo, err)
		}
		for _, e := range decoded {
			if err := index.addVersion(chart, e); err != nil {
				return err
			}
		}
		item = item[:0]
		return nil
	}
	add := func(parts ...[]byte) error {
		for _, p := range parts {
			if len(item)+len(p) > limits.MaxEntryBytes {
				return fmt.Errorf("%w: a version of chart %q in the index is longer than %d bytes", ErrLimitExceeded, chart, limits.MaxEntryBytes)
			}
			item = append(item, p...)
		}
		return nil
	}
	newline := []byte("\n")
	started := false // a line other than a comment was read
	isMarker := func(content []byte) bool {
		return bytes.Equal(content, []byte("---")) || bytes.Equal(content, []byte("..."))
	}
lines:
	for {
		line, err := readLine(br, limits.MaxEntryBytes)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		lineNo++
		content := bytes.TrimRight(line, " \t\r\n")
		indent := len(content) - len(bytes.TrimLeft(content, " "))
		empty := len(content) == indent
		blank := empty || content[indent] == '#'
		if state == top {
			if blank || indent > 0 {
				continue // a comment, or the value of another top-level key
			}
			if isMarker(content) {
				if started {
					break lines // the first document is the index, as for a YAML parser
				}
				continue
			}
			started = true
			key, value, ok := topLevelKey(content)
			switch {
			case !ok:
				return nil, errNotBlock
			case key == "entries" && value == "":
				state, sawEntries = inEntries, true
			case key == "entries":
				return nil, errNotBlock
			}
			continue
		}
		// In entries.
		if blank {
			switch {
			case len(item) > 0 && !empty && indent > itemIndent:
				// A comment, or a line of a block scalar that starts with '#'.
				err = add(content, newline)
			case len(item) > 0:
				err = add(newline) // keeps a block scalar's blank lines
			}
			if err != nil {
				return nil, err
			}
			continue
		}
		switch {
		case indent == 0:
			if err := flush(); err != nil {
				return nil, err
			}
			if isMarker(content) {
				break lines
			}
			state, haveChart = top, false
			key, value, ok := topLevelKey(content)
			if !ok || key == "entries" {
				return nil, fmt.Errorf("%w: line %d: %q after entries", ErrInvalidIndex, lineNo, clip(content))
			}
			_ = value
			continue
		case chartIndent < 0 || indent == chartIndent && !isItem(content[indent:]):
			if chartIndent < 0 {
				chartIndent = indent
			}
			if err := flush(); err != nil {
				return nil, err
			}
			name, value, ok := chartKey(content)
			if !ok {
				return nil, fmt.Errorf("%w: line %d: %q is not a chart's name", ErrInvalidIndex, lineNo, clip(content))
			}
			if value != "" && value != "[]" {
				return nil, errNotBlock
			}
			if _, dup := index.Charts[name]; dup {
				return nil, fmt.Errorf("%w: line %d: chart %q is listed twice", ErrInvalidIndex, lineNo, name)
			}
			chart, haveChart, itemIndent = name, true, -1
			if err := index.addChart(chart); err != nil {
				return nil, err
			}
			continue
		case indent < chartIndent:
			return nil, fmt.Errorf("%w: line %d: %q is indented less than the charts' names", ErrInvalidIndex, lineNo, clip(content))
		case !haveChart:
			return nil, fmt.Errorf("%w: line %d: %q belongs to no chart", ErrInvalidIndex, lineNo, clip(content))
		}
		if itemIndent < 0 {
			if !isItem(content[indent:]) {
				return nil, errNotBlock // a chart's versions in another layout
			}
			itemIndent = indent
		}
		if indent == itemIndent {
			if !isItem(content[indent:]) {
				return nil, fmt.Errorf("%w: line %d: %q is not a version of chart %q", ErrInvalidIndex, lineNo, clip(content), chart)
			}
			if err := flush(); err != nil {
				return nil, err
			}
		} else if indent < itemIndent {
			return nil, fmt.Errorf("%w: line %d: %q is indented less than the versions of chart %q", ErrInvalidIndex, lineNo, clip(content), chart)
		}
		if err := add(content, newline); err != nil {
			return nil, err
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if !sawEntries {
		return nil, fmt.Errorf("%w: no entries", ErrInvalidIndex)
	}
	return index, nil
}

// parseWhole parses an index in a layout that cannot be cut into entries
// (flow style YAML) as a whole: what rec kept of the bytes read so far and
// the rest, if together they are at most rec.max bytes.
func parseWhole(br *bufio.Reader, rec *recorder, why error, maxRetained int64) (*Index, error) {
	if _, err := io.Copy(io.Discard, br); err != nil && !errors.Is(err, ErrLimitExceeded) {
		return nil, err
	}
	if rec.overflowed {
		return nil, fmt.Errorf("%w: the index is not in the layout helm writes (%v), and such an index is parsed whole, only up to %d bytes", ErrLimitExceeded, why, rec.max)
	}
	var whole struct {
		Entries map[string][]entry `yaml:"entries"`
	}
	if err := yaml.Unmarshal(rec.kept, &whole); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidIndex, err)
	}
	if whole.Entries == nil {
		return nil, fmt.Errorf("%w: no entries", ErrInvalidIndex)
	}
	index := &Index{Charts: make(map[string][]ChartVersion, len(whole.Entries)), maxRetained: maxRetained}
	for chart, entries := range whole.Entries {
		if err := index.addChart(chart); err != nil {
			return nil, err
		}
		for _, e := range entries {
			if err := index.addVersion(chart, e); err != nil {
				return nil, err
			}
		}
	}
	return index, nil
}

// isItem says whether s (a line without its indentation) starts a block
// sequence item.
func isItem(s []byte) bool {
	return bytes.Equal(s, []byte("-")) || bytes.HasPrefix(s, []byte("- "))
}

// topLevelKey splits a plain "key: value" line at indentation 0.
func topLevelKey(line []byte) (key, value string, ok bool) {
	k, v, found := bytes.Cut(line, []byte(":"))
	if !found || len(k) == 0 || bytes.ContainsAny(k, " \t\"'{}[]#&*!|>%@`,?") {
		return "", "", false
	}
	if len(v) > 0 && v[0] != ' ' {
		return "", "", false
	}
	value = strings.TrimSpace(string(v))
	if strings.HasPrefix(value, "#") {
		value = ""
	}
	return string(k), value, true
}

// chartKey decodes a chart's key line ("  name:" or a quoted name) with a
// YAML parser.
func chartKey(line []byte) (name, value string, ok bool) {
	var m map[string]yaml.Node
	if err := yaml.Unmarshal(line, &m); err != nil || len(m) != 1 {
		return "", "", false
	}
	for k, v := range m {
		name = k
		switch {
		case v.Kind == 0, v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		case v.Kind == yaml.SequenceNode && len(v.Content) == 0:
			value = "[]"
		default:
			value = "flow"
		}
	}
	return name, value, name != ""
}

// readLine reads one line (with its newline) of at most max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, fmt.Errorf("%w: a line of the index is longer than %d bytes", ErrLimitExceeded, max)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(line) > 0:
			return line, nil
		default:
			return nil, err
		}
	}
}

// parseJSON streams a JSON index: the tokens down to entries, then each
// chart's versions decoded one at a time.
func parseJSON(r io.Reader, maxRetained int64) (*Index, error) {
	dec := json.NewDecoder(r)
	index := &Index{Charts: map[string][]ChartVersion{}, maxRetained: maxRetained}
	fail := func(err error) (*Index, error) {
		return nil, fmt.Errorf("%w: %v", ErrInvalidIndex, err)
	}
	if err := expectDelim(dec, '{'); err != nil {
		return fail(err)
	}
	sawEntries := false
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return fail(err)
		}
		if key != "entries" {
			var skip json.RawMessage // another top-level key's value
			if err := dec.Decode(&skip); err != nil {
				return fail(err)
			}
			continue
		}
		sawEntries = true
		if err := expectDelim(dec, '{'); err != nil {
			return fail(err)
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return fail(err)
			}
			chart, _ := tok.(string)
			if err := expectDelim(dec, '['); err != nil {
				return fail(fmt.Errorf("chart %q: %v", chart, err))
			}
			if err := index.addChart(chart); err != nil {
				return nil, err
			}
			for dec.More() {
				var e entry
				if err := dec.Decode(&e); err != nil {
					return fail(fmt.Errorf("chart %q: %v", chart, err))
				}
				if err := index.addVersion(chart, e); err != nil {
					return nil, err
				}
			}
			if _, err := dec.Token(); err != nil { // ]
				return fail(err)
			}
		}
		if _, err := dec.Token(); err != nil { // }
			return fail(err)
		}
	}
	if !sawEntries {
		return fail(errors.New("no entries"))
	}
	return index, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %v, found %v", want, tok)
	}
	return nil
}

// clip shortens a line for an error message.
func clip(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

// limitedReader reads at most left bytes and says when r had more.
type limitedReader struct {
	r        io.Reader
	left     int64
	exceeded bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		var one [1]byte
		if n, _ := l.r.Read(one[:]); n > 0 {
			l.exceeded = true
			return 0, ErrLimitExceeded
		}
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// recorder keeps the bytes read through it while they are at most max,
// for an index that must be parsed whole; past max it keeps nothing.
type recorder struct {
	r          io.Reader
	max        int64
	kept       []byte
	overflowed bool
}

func (c *recorder) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if !c.overflowed {
		if int64(len(c.kept)+n) > c.max {
			c.kept, c.overflowed = nil, true
		} else {
			c.kept = append(c.kept, p[:n]...)
		}
	}
	return n, err
}
