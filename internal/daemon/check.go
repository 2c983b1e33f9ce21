package daemon

import (
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/seed-a07d1050/portcullis/internal/cidrlist"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
	"github.com/seed-a07d1050/portcullis/internal/route"
)

// Check validates cfg and builds, without binding a socket, connecting anywhere or starting
// anything, every value the configuration describes that only its runtime package can
// check: the deny and allow lists, the htpasswd files, each forward listener's destination
// policy, its interception (the CA, the leaves, the rules, the upstream roots), and the
// target patterns of the target_host overrides of limits and rates (config checks the rate
// values themselves). Start and Reload run the same pass
// before they bind or build anything, so `portcullis check` refuses exactly what they
// refuse. It returns nil, or every problem found, each an *config.Error placed at the field
// that named the value (file:line:col: path: what is wrong), wrapping config.ErrInvalid. A
// cfg that Validate refuses is not built: the error is Validate's.
func Check(cfg *config.Config) error {
	if cfg == nil {
		return errors.New("daemon: nil config")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	_, err := buildValues(cfg.Effective())
	return err
}

// builtValues are what buildValues built that the prepare step uses as they are: the deny
// and allow lists by listener name (nil for a listener without any).
type builtValues struct {
	lists map[string]*cidrlist.Matcher
}

// buildValues builds what cfg, valid and effective, describes beyond what config checks,
// reporting every problem at the field that named it. It is the first thing Start, Reload
// and Check do after cfg.Validate, so that all three refuse the same configurations.
func buildValues(cfg *config.Config) (builtValues, error) {
	probs := cfg.Problems()
	out := builtValues{lists: make(map[string]*cidrlist.Matcher, len(cfg.Listeners))}
	for i := range cfg.Listeners {
		lc := &cfg.Listeners[i]
		at := config.ListenerPath(i)
		out.lists[lc.Name] = accessLists(lc, at, probs)
		checkListener(lc, at, probs)
	}
	return out, probs.Err()
}

// checkListener builds, and drops, what listener lc (at path at) describes beyond its
// lists, the same way its route table builder does.
func checkListener(lc *config.Listener, at string, probs *config.Problems) {
	if lc.Auth != nil && lc.Protocol.Uses("auth") && lc.RoutesFrom == "" {
		checkHtpasswd(lc.Auth.Htpasswd, at+".auth.htpasswd", probs)
	}
	if lc.Protocol.Uses("rate") && lc.Rate != nil {
		checkRateTargets(lc.Rate, at+".rate.overrides", probs)
	}
	if lc.IsForward() && lc.Forward != nil {
		checkForward(lc, at+".forward", probs)
		return
	}
	if !lc.Protocol.IsHTTP() {
		return
	}
	for i := range lc.Routes {
		rp := config.IndexPath(at+".routes", i)
		if r := lc.Routes[i].Rate; r != nil {
			checkRateTargets(r, rp+".rate.overrides", probs)
		}
	}
}

// checkForward builds the destination policy, the target patterns and the interception of
// forward listener lc, at p (its forward block).
func checkForward(lc *config.Listener, p string, probs *config.Problems) {
	fw := lc.Forward
	if _, err := route.ForwardPolicy(fw); err != nil {
		probs.Add(p+".destinations", err, strings.TrimPrefix(err.Error(), "forward: "))
	}
	for i := range fw.Limits {
		if l := &fw.Limits[i]; l.Key == config.KeyTargetHost {
			checkTargets(l.Overrides, config.IndexPath(p+".limits", i)+".overrides", probs)
		}
	}
	if ic := fw.Intercept; ic != nil {
		checkIntercept(ic, p+".intercept", probs)
	}
}

// checkHtpasswd loads the htpasswd file at path p as proxyauth.New does, reporting each bad
// line as a problem of p.
func checkHtpasswd(file, p string, probs *config.Problems) {
	if _, err := proxyauth.LoadHtpasswd(file); err != nil {
		htpasswdProblems(file, p, err, probs)
	}
}

// htpasswdProblems reports why an htpasswd file does not load: that it cannot be read, or
// one problem per bad line.
func htpasswdProblems(file, p string, err error, probs *config.Problems) {
	if msg, ok := config.FileProblem(file, err); ok {
		probs.Add(p, err, msg)
		return
	}
	for _, e := range unjoin(err) {
		msg := strings.TrimPrefix(e.Error(), proxyauth.ErrHtpasswd.Error()+": ")
		probs.Add(p, e, "does not load: "+msg)
	}
}

// unjoin returns the errors err joins, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// checkTargets parses the overrides of a target_host limit as the forward proxy applies
// them, at p: each must name a target, "host:port" or "host", and no two the same one.
func checkTargets[V any](overrides map[string]V, p string, probs *config.Problems) {
	bad := false
	for _, key := range slices.Sorted(maps.Keys(overrides)) {
		if key == "" {
			continue // config reports it
		}
		if _, err := forward.TargetPermits(map[string]int{key: 1}); err != nil {
			bad = true
			probs.Add(config.KeyPath(p, key), err, "must be a target host or host:port: "+targetProblem(err)+config.QuoteGot(key))
		}
	}
	if bad {
		return
	}
	all := make(map[string]int, len(overrides))
	for key := range overrides {
		all[key] = 1
	}
	if _, err := forward.TargetPermits(all); err != nil {
		probs.Add(p, err, strings.TrimPrefix(err.Error(), "forward: "))
	}
}

// checkRateTargets checks the overrides of a target_host rate at p as checkTargets does a
// limit's.
func checkRateTargets(r *config.Rate, p string, probs *config.Problems) {
	if r.Key == config.KeyTargetHost {
		checkTargets(r.Overrides, p, probs)
	}
}

// targetProblem is the reason a target does not parse, without the package prefixes.
func targetProblem(err error) string {
	var te *forward.TargetError
	if errors.As(err, &te) {
		return te.Reason
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// checkIntercept builds the interception of ic at p with the loaders intercept.NewAssembly
// uses, without a proxy or a session: the CA (and its key file's mode), the leaves it
// signs, the intercept and bypass rules and the upstream roots, each problem at the field
// it is about.
func checkIntercept(ic *config.Intercept, p string, probs *config.Problems) {
	ca, _, _, err := intercept.LoadCAFiles(ic.CACert, ic.CAKey, ic.AllowReadableCAKey)
	if err != nil {
		caProblem(p, err, probs)
	} else if _, err := route.LeafSettings(ic).NewLeaves(ca); err != nil {
		probs.Add(p+".leaves", err, "does not build: "+strings.TrimPrefix(err.Error(), "intercept: "))
	}
	ruleProblems(ic.Intercept, p+".intercept", probs)
	ruleProblems(ic.Bypass, p+".bypass", probs)
	if f := ic.Upstream.CAFile; f != "" {
		if _, err := intercept.LoadRoots(f); err != nil {
			rootsProblem(f, p+".upstream.ca_file", err, probs)
		}
	}
}

// caProblem reports an intercept.LoadCAFiles error at the field of the file it is about.
func caProblem(p string, err error, probs *config.Problems) {
	var ce *intercept.CAFileError
	if !errors.As(err, &ce) {
		probs.Add(p, err, err.Error())
		return
	}
	fp := p + ".ca_key"
	if ce.Cert {
		fp = p + ".ca_cert"
	}
	switch msg, isRead := config.FileProblem(ce.File, ce.Err); {
	case isRead:
		probs.Add(fp, ce.Err, msg)
	case errors.Is(ce.Err, intercept.ErrKeyReadable):
		probs.Add(fp, ce.Err, strings.TrimPrefix(ce.Err.Error(), "intercept: ")+config.QuoteGot(ce.File))
	default:
		probs.Add(fp, ce.Err, "does not load: "+strings.TrimPrefix(ce.Err.Error(), "intercept: ")+config.QuoteGot(ce.File))
	}
}

// ruleProblems parses a list of intercept or bypass rules at p, reporting each bad entry
// at its own index.
func ruleProblems(entries []string, p string, probs *config.Problems) {
	_, err := intercept.ParseRules(entries)
	if err == nil {
		return
	}
	for _, e := range unjoin(err) {
		var re *intercept.RuleError
		if !errors.As(e, &re) {
			probs.Add(p, e, strings.TrimPrefix(e.Error(), "intercept: "))
			continue
		}
		probs.Add(config.IndexPath(p, re.Index), e, re.Reason+config.QuoteGot(entries[re.Index]))
	}
}

// rootsProblem reports why intercept.LoadRoots refused file, at p.
func rootsProblem(file, p string, err error, probs *config.Problems) {
	if msg, ok := config.FileProblem(file, err); ok {
		probs.Add(p, err, msg)
		return
	}
	msg := strings.TrimPrefix(err.Error(), "intercept: upstream CA file "+file)
	msg = strings.TrimPrefix(strings.TrimPrefix(msg, ":"), " ")
	probs.Add(p, err, "does not load: "+msg+config.QuoteGot(file))
}
