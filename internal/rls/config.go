package rls

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/rate"
)

// maxFileSize bounds one rule file, as config.MaxFileSize bounds the daemon's.
const maxFileSize = config.MaxFileSize

// maxFiles bounds how many files one rule directory may hold.
const maxFiles = 10_000

// fileDoc is one rule file in envoyproxy/ratelimit's format: a domain and its
// descriptor tree.
type fileDoc struct {
	Domain      string          `yaml:"domain"`
	Descriptors []descriptorDoc `yaml:"descriptors"`
}

// descriptorDoc is one level of a descriptor tree.
type descriptorDoc struct {
	Key         string          `yaml:"key"`
	Value       string          `yaml:"value"`
	RateLimit   *rateLimitDoc   `yaml:"rate_limit"`
	Descriptors []descriptorDoc `yaml:"descriptors"`
	ShadowMode  bool            `yaml:"shadow_mode"`
	// DetailedMetric counts this rule's decisions per value of its last entry.
	DetailedMetric bool `yaml:"detailed_metric"`
}

// rateLimitDoc is a rule's limit: the reference's fields, then Portcullis's.
type rateLimitDoc struct {
	Unit            string        `yaml:"unit"`
	RequestsPerUnit int           `yaml:"requests_per_unit"`
	Unlimited       bool          `yaml:"unlimited"`
	Name            string        `yaml:"name"`
	Replaces        []replacesDoc `yaml:"replaces"`

	// Portcullis's additions (nginx limit_req's words).
	Burst     *int                        `yaml:"burst"`
	Delay     *int                        `yaml:"delay"`
	NoDelay   bool                        `yaml:"nodelay"`
	Overrides map[string]config.RateLimit `yaml:"overrides"`
}

type replacesDoc struct {
	Name string `yaml:"name"`
}

// A Rule is one descriptor of the configuration that carries a rate_limit.
type Rule struct {
	// ID is the rule's name in metrics and logs, the reference's stats key:
	// the domain, then each level's key (with _value when it has one),
	// joined by dots: "edge.remote_address", "edge.path_/login.user".
	ID string
	// Name is rate_limit.name ("" when not given), the name replaces uses.
	Name string
	// Replaces are the names of the rules this one replaces in a request
	// that matches both.
	Replaces []string

	// Unit and RequestsPerUnit are the limit as written, sent back to Envoy
	// as DescriptorStatus.current_limit.
	Unit            pb.RateLimitResponse_RateLimit_Unit
	RequestsPerUnit uint32

	// Unlimited rules never refuse and count nothing.
	Unlimited bool
	// Deny: requests_per_unit 0, which refuses every request.
	Deny bool
	// Limit is the GCRA limit the rule counts with.
	Limit rate.Limit
	// Overrides give single values of the rule's last entry their own limit.
	Overrides map[string]rate.Limit

	Shadow   bool
	Detailed bool

	// File and Line locate the rule, for logs.
	File string
	Line int

	metrics *ruleMetrics
	// current is the limit sent back as DescriptorStatus.current_limit,
	// built once and shared by every answer (never modified).
	current *pb.RateLimitResponse_RateLimit
}

// limitFor returns the limit for the value of the rule's last entry.
func (r *Rule) limitFor(value string) rate.Limit {
	if r.Overrides != nil {
		if l, ok := r.Overrides[value]; ok {
			return l
		}
	}
	return r.Limit
}

// entryKey is one level of the descriptor tree: a key with a value, or a
// key alone (any value).
type entryKey struct {
	key, value string
	hasValue   bool
}

// node is one level of a domain's descriptor tree.
type node struct {
	children  map[entryKey]*node
	wildcards []wildcard // value prefixes, in the order written
	rule      *Rule
}

type wildcard struct {
	key, prefix string
	n           *node
}

// Config is a set of rule files: the domains Envoy names and their
// descriptor trees. It is immutable once loaded and safe for concurrent
// use.
type Config struct {
	domains  map[string]*node
	rules    []*Rule
	files    []string
	warnings []string
}

// Warnings returns what c holds that loads but does nothing, one line
// each, at its file:line:col, for the log.
func (c *Config) Warnings() []string { return c.warnings }

// Rules returns every rule of c, in file and then written order.
func (c *Config) Rules() []*Rule { return c.rules }

// Domains returns the names of c's domains, sorted.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// units maps the reference's unit names (any case) to the proto's units
// and their lengths: the reference's own (a month of 30 days, a year of
// 365).
var units = map[string]struct {
	unit pb.RateLimitResponse_RateLimit_Unit
	per  time.Duration
}{
	"second": {pb.RateLimitResponse_RateLimit_SECOND, time.Second},
	"minute": {pb.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	"hour":   {pb.RateLimitResponse_RateLimit_HOUR, time.Hour},
	"day":    {pb.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	"week":   {pb.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	"month":  {pb.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	"year":   {pb.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// unitLength returns the length of a proto unit, 0 for UNKNOWN.
func unitLength(u pb.RateLimitResponse_RateLimit_Unit) time.Duration {
	for _, v := range units {
		if v.unit == u {
			return v.per
		}
	}
	return 0
}

// LoadDir loads every regular file of dir (not its subdirectories, not
// hidden files) as one rule file, all or nothing: the Config, or every
// problem of every file as config.Error values (file:line:col: path:
// problem) joined, each wrapping config.ErrInvalid. Two files naming the
// same domain are an error, as in the reference without
// MERGE_DOMAIN_CONFIG. A directory with no file is an error.
func LoadDir(dir string) (*Config, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rls: rule directory: %w", err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := os.Stat(filepath.Join(dir, e.Name())) // follows symlinks (a ConfigMap's)
		if err != nil {
			return nil, fmt.Errorf("rls: rule directory: %w", err)
		}
		if info.Mode().IsRegular() {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("rls: rule directory %s holds no rule file", dir)
	}
	if len(names) > maxFiles {
		return nil, fmt.Errorf("rls: rule directory %s holds %d files, more than %d", dir, len(names), maxFiles)
	}
	slices.Sort(names)
	files := make(map[string][]byte, len(names))
	for _, n := range names {
		path := filepath.Join(dir, n)
		data, err := readFile(path)
		if err != nil {
			return nil, err
		}
		files[path] = data
	}
	return Parse(files)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("rls: read %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("rls: %s is larger than %d bytes", path, maxFileSize)
	}
	return data, nil
}

// Parse builds a Config from rule files, named by path (the names appear
// in errors). It is LoadDir without the file system.
func Parse(files map[string][]byte) (*Config, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	c := &Config{domains: make(map[string]*node), files: names}
	var errs []error
	domainFile := make(map[string]string)
	for _, name := range names {
		if err := checkShape(name, files[name]); err != nil {
			errs = append(errs, err)
			continue
		}
		var doc fileDoc
		pos, err := config.Decode(name, files[name], &doc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b := builder{pos: pos, file: name}
		switch {
		case doc.Domain == "":
			b.fail("domain", "a rule file needs a domain, the one Envoy's filter names")
		case domainFile[doc.Domain] != "":
			b.fail("domain", "domain %q is also in %s: one file per domain", doc.Domain, domainFile[doc.Domain])
		default:
			domainFile[doc.Domain] = name
			root := &node{children: make(map[entryKey]*node)}
			b.level(root, doc.Descriptors, "descriptors", doc.Domain)
			if len(b.errs) == 0 {
				c.domains[doc.Domain] = root
				c.rules = append(c.rules, b.rules...)
				c.warnings = append(c.warnings, b.warnings...)
			}
		}
		errs = append(errs, b.errs...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// builder turns one file's descriptor tree into nodes and rules.
type builder struct {
	pos      *config.Positions
	file     string
	errs     []error
	rules    []*Rule
	warnings []string
}

func (b *builder) fail(path, format string, args ...any) {
	b.errs = append(b.errs, b.pos.Errorf(path, format, args...))
}

func (b *builder) level(parent *node, docs []descriptorDoc, path, id string) {
	for i := range docs {
		d := &docs[i]
		p := fmt.Sprintf("%s[%d]", path, i)
		if d.Key == "" {
			b.fail(p+".key", "a descriptor needs a key (the entry key Envoy sends)")
			continue
		}
		k := entryKey{key: d.Key, value: d.Value, hasValue: d.Value != ""}
		childID := id + "." + d.Key
		if d.Value != "" {
			childID += "_" + d.Value
		}
		n := &node{children: make(map[entryKey]*node)}
		if prefix, ok := strings.CutSuffix(d.Value, "*"); ok {
			if prev := findWildcard(parent, d.Key, prefix); prev != nil {
				b.fail(p+".value", "duplicate descriptor %s", childID)
				continue
			}
			parent.wildcards = append(parent.wildcards, wildcard{key: d.Key, prefix: prefix, n: n})
		} else {
			if _, dup := parent.children[k]; dup {
				b.fail(p+".key", "duplicate descriptor %s", childID)
				continue
			}
			parent.children[k] = n
		}
		if d.RateLimit != nil {
			if r := b.rule(d, p, childID); r != nil {
				n.rule = r
				b.rules = append(b.rules, r)
			}
		} else if d.ShadowMode || d.DetailedMetric {
			// The reference ignores both without a rate_limit; so do we, aloud.
			b.warnings = append(b.warnings, b.pos.Errorf(p, "shadow_mode and detailed_metric do nothing without a rate_limit on the same descriptor").Error())
		}
		b.level(n, d.Descriptors, p+".descriptors", childID)
	}
}

func findWildcard(n *node, key, prefix string) *node {
	for _, w := range n.wildcards {
		if w.key == key && w.prefix == prefix {
			return w.n
		}
	}
	return nil
}

// rule checks a descriptor's rate_limit and builds its Rule, or records
// the problems and returns nil.
func (b *builder) rule(d *descriptorDoc, p, id string) *Rule {
	rl := d.RateLimit
	rp := p + ".rate_limit"
	before := len(b.errs)
	pos, _ := b.pos.At(rp)
	r := &Rule{ID: id, Name: rl.Name, Shadow: d.ShadowMode, Detailed: d.DetailedMetric, File: b.file, Line: pos.Line}
	for i, rep := range rl.Replaces {
		ip := fmt.Sprintf("%s.replaces[%d].name", rp, i)
		switch {
		case rep.Name == "":
			b.fail(ip, "a replaces entry needs a name")
		case rep.Name == rl.Name:
			b.fail(ip, "a rule cannot replace itself (got %q)", rep.Name)
		default:
			r.Replaces = append(r.Replaces, rep.Name)
		}
	}
	u, unitOK := units[strings.ToLower(rl.Unit)]
	extras := rl.Burst != nil || rl.Delay != nil || rl.NoDelay || rl.Overrides != nil
	if rl.Unlimited {
		if rl.Unit != "" {
			b.fail(rp+".unit", "an unlimited rule takes no unit (got %q)", rl.Unit)
		}
		if rl.RequestsPerUnit != 0 {
			b.fail(rp+".requests_per_unit", "an unlimited rule takes no requests_per_unit (got %d)", rl.RequestsPerUnit)
		}
		if extras {
			b.fail(rp, "an unlimited rule takes no burst, delay, nodelay or overrides")
		}
		r.Unlimited = true
		return b.done(before, r)
	}
	switch {
	case rl.Unit == "":
		b.fail(rp+".unit", "a rate_limit needs a unit: second, minute, hour, day, week, month or year")
	case !unitOK:
		b.fail(rp+".unit", "must be second, minute, hour, day, week, month or year (got %q)", rl.Unit)
	}
	switch {
	case rl.RequestsPerUnit < 0:
		b.fail(rp+".requests_per_unit", "must be 0 or more (got %d)", rl.RequestsPerUnit)
	case rl.RequestsPerUnit > 1_000_000_000:
		b.fail(rp+".requests_per_unit", "must be at most 1000000000 (got %d)", rl.RequestsPerUnit)
	}
	if len(b.errs) > before {
		return nil
	}
	r.Unit, r.RequestsPerUnit = u.unit, uint32(rl.RequestsPerUnit)
	if rl.RequestsPerUnit == 0 {
		// The reference refuses every request of a rule of 0 per unit.
		if extras {
			b.fail(rp, "a rule of 0 requests_per_unit refuses everything: it takes no burst, delay, nodelay or overrides")
		}
		r.Deny = true
		return b.done(before, r)
	}
	lim := rate.Limit{Rate: rate.Rate{Events: rl.RequestsPerUnit, Per: u.per}, Burst: rl.RequestsPerUnit - 1, Delay: rate.NoDelay}
	if rl.Burst != nil {
		if *rl.Burst < 0 {
			b.fail(rp+".burst", "must be 0 or more (got %d)", *rl.Burst)
		}
		lim.Burst = *rl.Burst
	}
	switch {
	case rl.Delay != nil && rl.NoDelay:
		b.fail(rp+".delay", "delay and nodelay exclude each other")
	case rl.Delay != nil && *rl.Delay < 0:
		b.fail(rp+".delay", "must be 0 or more (got %d)", *rl.Delay)
	case rl.Delay != nil:
		lim.Delay = *rl.Delay
	}
	if len(b.errs) > before {
		return nil
	}
	if err := lim.Validate(); err != nil {
		b.fail(rp, "%v", err)
		return nil
	}
	r.Limit = lim
	if rl.Overrides != nil {
		r.Overrides = make(map[string]rate.Limit, len(rl.Overrides))
	}
	for v, o := range rl.Overrides {
		// config reads the text form (it imports no runtime package); the values are rate's.
		lim := rate.Limit{Rate: rate.Rate{Events: o.Rate.Events, Per: o.Rate.Per}, Burst: o.Burst, Delay: o.Delay}
		if err := lim.Validate(); err != nil {
			b.fail(fmt.Sprintf("%s.overrides[%q]", rp, v), "%v", err)
		}
		r.Overrides[v] = lim
	}
	return b.done(before, r)
}

func (b *builder) done(before int, r *Rule) *Rule {
	if len(b.errs) > before {
		return nil
	}
	if !r.Unlimited {
		r.current = &pb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit}
	}
	return r
}

// Bounds on a rule file's shape, checked before decoding: descriptor
// trees nest a few levels deep in practice, and the decoder's cost grows
// with the depth times the number of values (each value's path is
// written out), so a file nested deeper, or an alias that nests a tree in
// itself, is refused up front.
const (
	maxDepth = 48 // YAML nodes from the root: about 22 descriptor levels
	maxNodes = 200_000
)

// checkShape refuses a document nested deeper than maxDepth or holding
// more than maxNodes values once aliases are expanded. A document that is
// not YAML passes: the decoder reports it at its line.
func checkShape(name string, data []byte) error {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return nil
	}
	budget := maxNodes
	var walk func(n *yaml.Node, depth int) *yaml.Node
	walk = func(n *yaml.Node, depth int) *yaml.Node {
		for hops := 0; n != nil && n.Kind == yaml.AliasNode && hops < 100; hops++ {
			n = n.Alias
		}
		if n == nil {
			return nil
		}
		budget--
		if depth > maxDepth || budget < 0 {
			return n
		}
		for _, c := range n.Content {
			if bad := walk(c, depth+1); bad != nil {
				return bad
			}
		}
		return nil
	}
	if bad := walk(&root, 0); bad != nil {
		return &config.Error{File: name, Line: bad.Line, Column: bad.Column,
			Msg: fmt.Sprintf("nested more than %d levels deep, or more than %d values once aliases are expanded", maxDepth, maxNodes)}
	}
	return nil
}
