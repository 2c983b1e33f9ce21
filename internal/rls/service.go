package rls

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/seed-a07d1050/portcullis/rate"
)

// MaxDescriptors bounds the descriptors of one request; Envoy sends one per
// matching rate limit action, a handful.
const MaxDescriptors = 64

// maxHits bounds one descriptor's weight (hits_addend).
const maxHits = 1 << 30

// maxRetryAfter bounds the retry-after header.
const maxRetryAfter = 365 * 24 * time.Hour

// ErrStore is wrapped by the error of a request the store could not
// decide (Redis away under on_error: closed): the gRPC status is
// Unavailable, and Envoy applies its failure_mode_deny.
var ErrStore = errors.New("rls: the store could not decide")

// A Service answers envoy.service.ratelimit.v3.RateLimitService's
// ShouldRateLimit from a Config and a store. It is safe for concurrent use;
// [Service.SetConfig] swaps the Config atomically, between two requests.
type Service struct {
	pb.UnimplementedRateLimitServiceServer

	cfg     atomic.Pointer[Config]
	store   Store
	metrics *Metrics
	log     *slog.Logger
	// sleep waits out a delay; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error

	scratch sync.Pool // *request
}

var _ pb.RateLimitServiceServer = (*Service)(nil)

// NewService returns a Service answering from cfg (required) with st (the
// local store when nil) and counting in m (none when nil). A nil log means
// slog.Default().
func NewService(cfg *Config, st Store, m *Metrics, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	if st == nil {
		st = NewLocalStore()
	}
	if m == nil {
		m = NewMetrics()
	}
	s := &Service{store: st, metrics: m, log: log, sleep: sleepCtx}
	s.scratch.New = func() any { return &request{} }
	s.SetConfig(cfg)
	return s
}

// SetConfig makes cfg the Config of every request that starts after it
// returns. The counts of a rule whose ID and values stay the same carry
// over; its new limit applies to them from then on.
func (s *Service) SetConfig(cfg *Config) {
	s.metrics.bind(cfg)
	s.cfg.Store(cfg)
}

// ReloadDir loads the rule directory dir and, when every file in it is
// valid, serves it from the next request on (SetConfig); otherwise the
// rules in use stay, the failure is counted, and the error says why: all
// or nothing.
func (s *Service) ReloadDir(dir string) (*Config, error) {
	cfg, err := LoadDir(dir)
	if err != nil {
		s.metrics.LoadFailed()
		return nil, err
	}
	s.SetConfig(cfg)
	return cfg, nil
}

// Config returns the Config in use.
func (s *Service) Config() *Config { return s.cfg.Load() }

// request is the scratch space of one ShouldRateLimit call.
type request struct {
	items []Item
	rules []*Rule
	vals  []string // the last entry's value of each descriptor
	gone  []bool   // replaced by another matched rule
	item  []int    // descriptor -> its Item, -1 none
	buf   []byte
}

// An Item is one counted descriptor of a request, as a [Store] sees it.
type Item struct {
	// Key names the counter: the rule's ID and the descriptor's values.
	Key string
	// Limit is the rule's limit for this value (an override's, or the
	// rule's own).
	Limit rate.Limit
	// N is the weight, hits_addend: at least 1.
	N int
	// Shadow: a refusal of this item does not refuse the request.
	Shadow bool
	// GiveBack: Envoy's is_negative_hits, N requests returned, nothing
	// decided.
	GiveBack bool
	// Deny: a rule of 0 per unit; the item is refused without counting.
	Deny bool

	// Decision is the store's answer.
	Decision rate.Decision
}

// ShouldRateLimit decides one request Envoy asks about: every descriptor
// is matched to its rule; the descriptors with a counting rule are
// decided together by the store, all or nothing (if one enforced
// descriptor is over its limit, none counts the request); the answer
// holds one status per descriptor in order, and OVER_LIMIT overall when
// one enforced descriptor is over. A descriptor that matches no rule, or
// a domain that is not configured, is OK, as the reference answers. An
// empty domain or no descriptor is InvalidArgument; a store that cannot
// decide gives Unavailable. A rule with a delay holds the answer for the
// delay its burst imposes, unless ctx ends first.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	start := time.Now()
	cfg := s.cfg.Load()
	domain := req.GetDomain()
	var err error
	switch n := len(req.GetDescriptors()); {
	case domain == "":
		err = status.Error(codes.InvalidArgument, "rls: the domain is empty")
	case n == 0:
		err = status.Error(codes.InvalidArgument, "rls: no descriptor")
	case n > MaxDescriptors:
		err = status.Errorf(codes.InvalidArgument, "rls: %d descriptors, more than %d", n, MaxDescriptors)
	}
	if err != nil {
		s.metrics.invalid.Inc()
		s.metrics.observe(cfg, domain, nil, err, time.Since(start))
		return nil, err
	}
	r := s.scratch.Get().(*request)
	defer s.scratch.Put(r)
	resp, err := s.decide(ctx, cfg, r, req)
	s.metrics.observe(cfg, domain, resp, err, time.Since(start))
	return resp, err
}

func (s *Service) decide(ctx context.Context, cfg *Config, r *request, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	domain := req.GetDomain()
	descs := req.GetDescriptors()
	hits := int(min(req.GetHitsAddend(), maxHits))
	if hits == 0 {
		hits = 1
	}
	r.rules, r.vals, r.gone, r.item = r.rules[:0], r.vals[:0], r.gone[:0], r.item[:0]
	for _, d := range descs {
		rule := cfg.match(domain, d.GetEntries())
		if o := d.GetLimit(); o != nil && cfg.hasDomain(domain) {
			rule = s.overrideRule(domain, o)
		}
		r.rules = append(r.rules, rule)
		last := ""
		if es := d.GetEntries(); len(es) > 0 {
			last = es[len(es)-1].GetValue()
		}
		r.vals = append(r.vals, last)
		r.gone = append(r.gone, false)
		r.item = append(r.item, -1)
	}
	replace(r.rules, r.gone)
	// The counted descriptors, in order.
	r.items = r.items[:0]
	itemOf := r.item
	for i, d := range descs {
		rule := r.rules[i]
		if rule == nil || rule.Unlimited {
			continue
		}
		n := hits
		if h := d.GetHitsAddend(); h != nil {
			n = int(min(h.GetValue(), maxHits))
		}
		if n == 0 {
			continue // a weight of 0 asks for the state without counting
		}
		r.buf = appendKey(r.buf[:0], rule.ID, d.GetEntries())
		itemOf[i] = len(r.items)
		r.items = append(r.items, Item{
			Key: string(r.buf), Limit: rule.limitFor(r.vals[i]), N: n,
			Shadow: rule.Shadow, GiveBack: d.GetIsNegativeHits(), Deny: rule.Deny,
		})
	}
	if len(r.items) > 0 {
		if err := s.store.Decide(ctx, r.items); err != nil {
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			s.log.Warn("rls: the store could not decide; answering Unavailable (Envoy applies failure_mode_deny)",
				slog.String("domain", domain), slog.Any("error", err))
			return nil, status.Errorf(codes.Unavailable, "%v: %v", ErrStore, err)
		}
	}
	resp := &pb.RateLimitResponse{
		OverallCode: pb.RateLimitResponse_OK,
		Statuses:    make([]*pb.RateLimitResponse_DescriptorStatus, len(descs)),
	}
	var delay, retry time.Duration
	for i := range descs {
		rule := r.rules[i]
		st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch {
		case r.gone[i]:
			s.metrics.replaced.Inc()
			continue
		case rule == nil:
			s.metrics.countUnknown(cfg, domain)
			continue
		case rule.Unlimited:
			st.LimitRemaining = math.MaxUint32
			rule.metrics.count(rule, r.vals[i], verdictUnlimited, hits)
			continue
		}
		st.CurrentLimit = rule.current
		k := itemOf[i]
		if k < 0 {
			continue // weight 0
		}
		it := &r.items[k]
		d := it.Decision
		st.LimitRemaining = uint32(min(max(d.Remaining(), 0), math.MaxUint32))
		st.DurationUntilReset = durationpb.New(d.Reset)
		if it.Deny {
			// Nothing is ever back: say one unit, as the reference's window.
			st.DurationUntilReset = durationpb.New(unitLength(rule.Unit))
			d.RetryAfter = unitLength(rule.Unit)
		}
		switch {
		case it.GiveBack:
			rule.metrics.count(rule, r.vals[i], verdictGivenBack, it.N)
		case !d.Allowed() && rule.Shadow:
			rule.metrics.count(rule, r.vals[i], verdictShadow, it.N)
		case !d.Allowed():
			st.Code = pb.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
			retry = max(retry, d.RetryAfter)
			rule.metrics.count(rule, r.vals[i], verdictOverLimit, it.N)
		case d.Delay > 0 && !rule.Shadow:
			delay = max(delay, d.Delay)
			rule.metrics.count(rule, r.vals[i], verdictDelayed, it.N)
		default:
			rule.metrics.count(rule, r.vals[i], verdictOK, it.N)
		}
	}
	if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
		// A weight above a key's whole burst never fits: say a year.
		secs := int64(math.Ceil(min(retry, maxRetryAfter).Seconds()))
		resp.ResponseHeadersToAdd = []*corepb.HeaderValue{{Key: "retry-after", Value: strconv.FormatInt(max(secs, 1), 10)}}
		return resp, nil
	}
	if delay > 0 {
		s.metrics.delays.Observe(delay.Seconds())
		if err := s.sleep(ctx, delay); err != nil {
			// The count stays: Envoy may let the request through on its
			// own timeout (failure_mode_deny false), as nginx keeps the
			// slot of a delayed request whose client left.
			return nil, status.FromContextError(err).Err()
		}
	}
	return resp, nil
}

// overrideRule is the rule of a descriptor that carries its own limit
// (Envoy's limit override, from dynamic metadata), as the reference
// applies it: requests_per_unit per unit × unit_multiplier, whatever the
// configuration says, never in shadow mode, counted apart from the
// configured rules. An unknown unit gives nil (no limit).
func (s *Service) overrideRule(domain string, o *rlpb.RateLimitDescriptor_RateLimitOverride) *Rule {
	unit := pb.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	per := unitLength(unit)
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		per *= time.Duration(m.GetValue())
	}
	if per <= 0 {
		return nil
	}
	n := int(min(o.GetRequestsPerUnit(), 1_000_000_000))
	r := &Rule{ID: domain + "._override", Unit: unit, RequestsPerUnit: uint32(n), Deny: n == 0}
	r.current = &pb.RateLimitResponse_RateLimit{RequestsPerUnit: uint32(n), Unit: unit, UnitMultiplier: o.GetUnitMultiplier()}
	r.metrics = s.metrics.overrideSeries(domain)
	if n > 0 {
		r.Limit = rate.Limit{Rate: rate.Rate{Events: n, Per: per}, Burst: n - 1, Delay: rate.NoDelay}
		if r.Limit.Validate() != nil {
			return nil
		}
	}
	return r
}

// replace drops, in place, the rules another matched rule replaces by
// name, as the reference's replaces does, and marks them in gone.
func replace(rules []*Rule, gone []bool) {
	for _, r := range rules {
		if r == nil || len(r.Replaces) == 0 {
			continue
		}
		for j, o := range rules {
			if o == nil || o == r || o.Name == "" {
				continue
			}
			for _, name := range r.Replaces {
				if o.Name == name {
					gone[j] = true
					break
				}
			}
		}
	}
	for j := range rules {
		if gone[j] {
			rules[j] = nil
		}
	}
}

// appendKey appends the counter name of a descriptor under rule id: the
// id, then every entry's key and value, each length-prefixed so that no
// two descriptors share a name.
func appendKey(b []byte, id string, entries []*rlpb.RateLimitDescriptor_Entry) []byte {
	b = append(b, id...)
	for _, e := range entries {
		b = append(b, 0)
		b = strconv.AppendInt(b, int64(len(e.GetKey())), 10)
		b = append(b, ':')
		b = append(b, e.GetKey()...)
		b = strconv.AppendInt(b, int64(len(e.GetValue())), 10)
		b = append(b, ':')
		b = append(b, e.GetValue()...)
	}
	return b
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
