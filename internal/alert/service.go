// Package alert tells operators what goes wrong: rules (a task FAILED,
// timeouts, stalled executions, N failures of a type in M minutes, a
// backlog older than T, no watchdog leader, a node gone) evaluated once
// across nodes by a leader, incidents that count occurrences instead of
// flooding (one open incident per rule and subject), recovery notices when
// the condition clears, silences and quiet periods, and channels — a
// generic JSON webhook and the formats of DingTalk, Feishu/Lark, WeCom and
// Slack-compatible bots, signed where the platform requires it.
//
// Notices are delivered as tasks of type alert.deliver (package worker runs
// them through the outbound client's destination policy): a failed delivery
// is visible and retryable like any other task, and rules ignore that type,
// so an alert about alert delivery cannot loop.
//
// Rules, channels and incidents belong to a tenant (the viewer's), and a
// rule watches its tenant's tasks; admins edit rules and channels, admins
// and operators silence and resolve incidents, every role reads them.
// Rules about the cluster (backlogs, the watchdog's leader, gone nodes) are
// a platform administrator's.
package alert

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/alertchannel"
	"github.com/taskgraph/taskgraph/ent/alertincident"
	"github.com/taskgraph/taskgraph/ent/alertrule"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/store"
)

// Config of a Service.
type Config struct {
	Store  *store.Store
	Engine *engine.Engine // creates the delivery tasks
	Sealer *seal.Sealer   // encrypts channel URLs and secrets
	Hub    *Hub           // tells this process's subscribers about incidents
	// Node names this process in cross-node notifications.
	Node string
	// PublicURL, when set, makes notices link to the incident in the
	// console.
	PublicURL string
	Logger    *slog.Logger
	// RulesChanged, when set, is called after a rule was created, changed
	// or deleted (the evaluator then applies it at once).
	RulesChanged func()
}

// Service is what the API and the evaluator do with rules, channels and
// incidents.
type Service struct {
	cfg    Config
	client *ent.Client
	log    *slog.Logger
}

// New validates cfg.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Engine == nil || cfg.Sealer == nil {
		return nil, errors.New("alert: store, engine and sealer are required")
	}
	if cfg.Hub == nil {
		cfg.Hub = NewHub()
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Service{cfg: cfg, client: cfg.Store.Client(), log: cfg.Logger.With("component", "alerts")}, nil
}

// SetRulesChanged sets Config.RulesChanged (the evaluator is built after
// the service).
func (s *Service) SetRulesChanged(fn func()) { s.cfg.RulesChanged = fn }

func (s *Service) rulesChanged() {
	if s.cfg.RulesChanged != nil {
		s.cfg.RulesChanged()
	}
}

// Hub is where changed incidents are published.
func (s *Service) Hub() *Hub { return s.cfg.Hub }

// sender is the identity delivery tasks are created as, in the tenant of
// what they announce (whose users then see them).
func sender(tenant string) auth.Viewer {
	return auth.Viewer{User: "alerts", Role: auth.RoleSystem, Source: auth.SourceSystem, Tenant: tenant}
}

// Limits of what a rule or channel may say.
const (
	maxName          = 100
	maxURL           = 2000
	maxSecret        = 256
	maxWindowSeconds = 7 * 24 * 3600
	maxThreshold     = 100000
)

func invalid(field, format string, args ...any) error {
	return &engine.ValidationError{Problems: []engine.Problem{{Field: field, Message: fmt.Sprintf(format, args...)}}}
}

func requireOperator(ctx context.Context, action string) (auth.Viewer, error) {
	v, err := auth.Require(ctx)
	if err != nil {
		return v, err
	}
	if !v.CanMutate() {
		return v, &auth.ForbiddenError{Role: v.Role, Action: action}
	}
	return v, nil
}

// ChannelInput is a channel to create or change. On change, nil URL and
// Secret keep the stored ones (they are never shown again); an empty
// Secret removes it.
type ChannelInput struct {
	Name   string
	Kind   alertchannel.Kind
	URL    *string
	Secret *string
}

// Channels lists the viewer's tenant's channels.
func (s *Service) Channels(ctx context.Context) ([]*ent.AlertChannel, error) {
	if _, err := auth.Require(ctx); err != nil {
		return nil, err
	}
	return s.client.AlertChannel.Query().Order(ent.Asc(alertchannel.FieldName)).All(ctx)
}

// CreateChannel adds a channel (admins).
func (s *Service) CreateChannel(ctx context.Context, in ChannelInput) (*ent.AlertChannel, error) {
	v, err := auth.RequireAdmin(ctx, "manage alert channels")
	if err != nil {
		return nil, err
	}
	if in.URL == nil {
		return nil, invalid("url", "is required")
	}
	var out *ent.AlertChannel
	err = s.cfg.Store.Tx(ctx, func(tx *ent.Tx) error {
		now := s.cfg.Store.Now()
		c := tx.AlertChannel.Create().SetTenant(v.Tenant).SetCreatedBy(v.User).SetCreatedAt(now).SetUpdatedAt(now)
		if err := s.fillChannel(in, c.Mutation()); err != nil {
			return err
		}
		name, _ := c.Mutation().Name()
		if n, err := tx.AlertChannel.Query().Where(alertchannel.Name(name)).Count(ctx); err != nil || n > 0 {
			if err != nil {
				return err
			}
			return invalid("name", "a channel named %q exists", name)
		}
		out, err = c.Save(ctx)
		return err
	})
	return out, err
}

// UpdateChannel changes a channel (admins).
func (s *Service) UpdateChannel(ctx context.Context, id int, in ChannelInput) (*ent.AlertChannel, error) {
	if _, err := auth.RequireAdmin(ctx, "manage alert channels"); err != nil {
		return nil, err
	}
	var out *ent.AlertChannel
	err := s.cfg.Store.Tx(ctx, func(tx *ent.Tx) error {
		cur, err := tx.AlertChannel.Get(ctx, id)
		if err != nil {
			return err
		}
		if in.Name != cur.Name {
			if n, err := tx.AlertChannel.Query().Where(alertchannel.Name(in.Name)).Count(ctx); err != nil || n > 0 {
				if err != nil {
					return err
				}
				return invalid("name", "a channel named %q exists", in.Name)
			}
		}
		u := tx.AlertChannel.UpdateOne(cur).SetUpdatedAt(s.cfg.Store.Now())
		if err := s.fillChannel(in, u.Mutation()); err != nil {
			return err
		}
		out, err = u.Save(ctx)
		return err
	})
	return out, err
}

// channelFields is what fillChannel sets on a create or an update.
type channelFields interface {
	SetName(string)
	SetKind(alertchannel.Kind)
	SetURLSealed([]byte)
	SetURLDisplay(string)
	SetSecretSealed([]byte)
	SetHasSecret(bool)
}

func (s *Service) fillChannel(in ChannelInput, m channelFields) error {
	in.Name = strings.TrimSpace(in.Name)
	if in.Name == "" || utf8.RuneCountInString(in.Name) > maxName {
		return invalid("name", "must be 1 to %d characters", maxName)
	}
	if err := alertchannel.KindValidator(in.Kind); err != nil {
		return invalid("kind", "must be WEBHOOK, DINGTALK, FEISHU, WECOM or SLACK")
	}
	m.SetName(in.Name)
	m.SetKind(in.Kind)
	if in.URL != nil {
		u, err := url.Parse(*in.URL)
		switch {
		case len(*in.URL) > maxURL:
			return invalid("url", "is longer than %d bytes", maxURL)
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			return invalid("url", "must be an http(s) URL")
		}
		m.SetURLSealed(s.cfg.Sealer.Seal([]byte(*in.URL)))
		m.SetURLDisplay(redact(*in.URL))
	}
	if in.Secret != nil {
		if len(*in.Secret) > maxSecret {
			return invalid("secret", "is longer than %d bytes", maxSecret)
		}
		if *in.Secret == "" {
			m.SetSecretSealed(nil)
			m.SetHasSecret(false)
		} else {
			m.SetSecretSealed(s.cfg.Sealer.Seal([]byte(*in.Secret)))
			m.SetHasSecret(true)
		}
	}
	return nil
}

// DeleteChannel removes a channel no rule uses (admins).
func (s *Service) DeleteChannel(ctx context.Context, id int) error {
	if _, err := auth.RequireAdmin(ctx, "manage alert channels"); err != nil {
		return err
	}
	return s.cfg.Store.Tx(ctx, func(tx *ent.Tx) error {
		ch, err := tx.AlertChannel.Get(ctx, id)
		if err != nil {
			return err
		}
		rules, err := tx.AlertRule.Query().All(ctx)
		if err != nil {
			return err
		}
		for _, r := range rules {
			if slices.Contains(r.ChannelIds, id) {
				return invalid("id", "channel %q is used by rule %q", ch.Name, r.Name)
			}
		}
		return tx.AlertChannel.DeleteOne(ch).Exec(ctx)
	})
}

// TestChannel sends a test notice through a channel (admins) and returns
// its delivery task.
func (s *Service) TestChannel(ctx context.Context, id int) (*ent.Task, error) {
	v, err := auth.RequireAdmin(ctx, "test alert channels")
	if err != nil {
		return nil, err
	}
	ch, err := s.client.AlertChannel.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Store.Now()
	n := Notice{Event: EventTest, Rule: "test of channel " + ch.Name, Kind: "TEST", Subject: "test",
		Summary: fmt.Sprintf("A test notice, sent by %s: this channel works.", v.User), OpenedAt: now}
	return s.deliver(ctx, ch.Tenant, ch.ID, n, fmt.Sprintf("alert-test-%d", ch.ID), "")
}

// deliver creates the delivery task of one notice to one channel. With a
// key, the same notice is created once whoever asks again (a new leader
// after a handover).
func (s *Service) deliver(ctx context.Context, tenant string, channelID int, n Notice, bizID, key string) (*ent.Task, error) {
	input, err := json.Marshal(DeliverInput{Channel: channelID, Notice: n})
	if err != nil {
		return nil, err
	}
	req := engine.CreateRequest{Type: DeliverType, Title: truncate(n.Title(), engine.MaxTitleLen), BizID: bizID, Input: input}
	if key != "" {
		req.IdempotencyKey = &key
	}
	return s.cfg.Engine.Create(auth.NewContext(context.WithoutCancel(ctx), sender(tenant)), req)
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// RuleInput is a rule to create or change.
type RuleInput struct {
	Name          string
	Kind          alertrule.Kind
	Enabled       bool
	TaskType      string
	Owner         string
	ErrorKind     string
	Threshold     int
	WindowSeconds int
	QuietSeconds  int
	ChannelIDs    []int
}

// clusterKinds are rules about the whole cluster, not a tenant's tasks:
// only platform administrators may set them.
var clusterKinds = []alertrule.Kind{alertrule.KindBACKLOG, alertrule.KindNO_LEADER, alertrule.KindNODE_GONE, alertrule.KindCLOCK_SKEW}

func (s *Service) checkRule(ctx context.Context, v auth.Viewer, in *RuleInput) error {
	in.Name = strings.TrimSpace(in.Name)
	switch {
	case in.Name == "" || utf8.RuneCountInString(in.Name) > maxName:
		return invalid("name", "must be 1 to %d characters", maxName)
	case alertrule.KindValidator(in.Kind) != nil:
		return invalid("kind", "unknown rule kind %q", in.Kind)
	case slices.Contains(clusterKinds, in.Kind) && !v.SeesEveryTenant():
		return invalid("kind", "%s rules watch the whole cluster: only a platform administrator may set them", in.Kind)
	case strings.HasPrefix(in.TaskType, "alert."):
		return invalid("taskType", "alert deliveries are not watched by rules (an alert about alert delivery would loop)")
	case in.ErrorKind != "" && !slices.Contains(lifecycle.AllErrorKinds, lifecycle.ErrorKind(in.ErrorKind)):
		return invalid("errorKind", "unknown error kind %q", in.ErrorKind)
	case in.ErrorKind != "" && in.Kind != alertrule.KindTASK_FAILED:
		return invalid("errorKind", "applies to TASK_FAILED rules only")
	case in.Threshold < 0 || in.Threshold > maxThreshold:
		return invalid("threshold", "must be 0 to %d", maxThreshold)
	case in.WindowSeconds < 0 || in.WindowSeconds > maxWindowSeconds:
		return invalid("windowSeconds", "must be 0 to %d", maxWindowSeconds)
	case in.QuietSeconds < 0 || in.QuietSeconds > maxWindowSeconds:
		return invalid("quietSeconds", "must be 0 to %d", maxWindowSeconds)
	case in.Kind == alertrule.KindFAILURE_RATE && (in.Threshold < 1 || in.WindowSeconds < 1):
		return invalid("threshold", "a FAILURE_RATE rule needs a threshold and a window")
	case in.Kind == alertrule.KindBACKLOG && in.WindowSeconds < 1:
		return invalid("windowSeconds", "a BACKLOG rule needs the age (windowSeconds) of the oldest waiting task")
	case len(in.ChannelIDs) > 20:
		return invalid("channelIds", "at most 20 channels")
	}
	if in.TaskType != "" && s.cfg.Engine.Registry() != nil {
		if _, ok := s.cfg.Engine.Registry().Lookup(in.TaskType); !ok {
			return invalid("taskType", "unknown task type %q", in.TaskType)
		}
	}
	slices.Sort(in.ChannelIDs)
	in.ChannelIDs = slices.Compact(in.ChannelIDs)
	if len(in.ChannelIDs) > 0 {
		// The viewer's tenant's channels only (access filters the read).
		n, err := s.client.AlertChannel.Query().Where(alertchannel.IDIn(in.ChannelIDs...)).Count(ctx)
		if err != nil {
			return err
		}
		if n != len(in.ChannelIDs) {
			return invalid("channelIds", "unknown channel")
		}
	}
	return nil
}

// Rules lists the viewer's tenant's rules.
func (s *Service) Rules(ctx context.Context) ([]*ent.AlertRule, error) {
	if _, err := auth.Require(ctx); err != nil {
		return nil, err
	}
	return s.client.AlertRule.Query().Order(ent.Asc(alertrule.FieldName)).All(ctx)
}

// CreateRule adds a rule (admins).
func (s *Service) CreateRule(ctx context.Context, in RuleInput) (*ent.AlertRule, error) {
	v, err := auth.RequireAdmin(ctx, "manage alert rules")
	if err != nil {
		return nil, err
	}
	if err := s.checkRule(ctx, v, &in); err != nil {
		return nil, err
	}
	var out *ent.AlertRule
	err = s.cfg.Store.Tx(ctx, func(tx *ent.Tx) error {
		if n, err := tx.AlertRule.Query().Where(alertrule.Name(in.Name)).Count(ctx); err != nil || n > 0 {
			if err != nil {
				return err
			}
			return invalid("name", "a rule named %q exists", in.Name)
		}
		now := s.cfg.Store.Now()
		out, err = tx.AlertRule.Create().SetTenant(v.Tenant).SetCreatedBy(v.User).SetCreatedAt(now).SetUpdatedAt(now).
			SetName(in.Name).SetKind(in.Kind).SetEnabled(in.Enabled).SetTaskType(in.TaskType).SetOwner(in.Owner).
			SetErrorKind(in.ErrorKind).SetThreshold(in.Threshold).SetWindowSeconds(in.WindowSeconds).
			SetQuietSeconds(in.QuietSeconds).SetChannelIds(in.ChannelIDs).Save(ctx)
		return err
	})
	if err == nil {
		s.rulesChanged()
	}
	return out, err
}

// UpdateRule changes a rule (admins). A change of what it watches resolves
// its open incidents (RULE_CHANGED, without a recovery notice): they were
// about the old condition.
func (s *Service) UpdateRule(ctx context.Context, id int, in RuleInput) (*ent.AlertRule, error) {
	v, err := auth.RequireAdmin(ctx, "manage alert rules")
	if err != nil {
		return nil, err
	}
	if err := s.checkRule(ctx, v, &in); err != nil {
		return nil, err
	}
	var out *ent.AlertRule
	var closed []*ent.AlertIncident
	err = s.cfg.Store.Tx(ctx, func(tx *ent.Tx) error {
		cur, err := tx.AlertRule.Get(ctx, id)
		if err != nil {
			return err
		}
		if in.Name != cur.Name {
			if n, err := tx.AlertRule.Query().Where(alertrule.Name(in.Name)).Count(ctx); err != nil || n > 0 {
				if err != nil {
					return err
				}
				return invalid("name", "a rule named %q exists", in.Name)
			}
		}
		changed := cur.Kind != in.Kind || cur.TaskType != in.TaskType || cur.Owner != in.Owner || cur.ErrorKind != in.ErrorKind ||
			cur.Threshold != in.Threshold || cur.WindowSeconds != in.WindowSeconds || (cur.Enabled && !in.Enabled)
		out, err = tx.AlertRule.UpdateOne(cur).SetUpdatedAt(s.cfg.Store.Now()).
			SetName(in.Name).SetKind(in.Kind).SetEnabled(in.Enabled).SetTaskType(in.TaskType).SetOwner(in.Owner).
			SetErrorKind(in.ErrorKind).SetThreshold(in.Threshold).SetWindowSeconds(in.WindowSeconds).
			SetQuietSeconds(in.QuietSeconds).SetChannelIds(in.ChannelIDs).Save(ctx)
		if err != nil {
			return err
		}
		if changed {
			closed, err = s.resolveRuleIncidents(ctx, tx, id, v.User)
		}
		return err
	})
	s.published(closed...)
	if err == nil {
		s.rulesChanged()
	}
	return out, err
}

// DeleteRule removes a rule (admins) and resolves its open incidents.
func (s *Service) DeleteRule(ctx context.Context, id int) error {
	v, err := auth.RequireAdmin(ctx, "manage alert rules")
	if err != nil {
		return err
	}
	var closed []*ent.AlertIncident
	err = s.cfg.Store.Tx(ctx, func(tx *ent.Tx) error {
		r, err := tx.AlertRule.Get(ctx, id)
		if err != nil {
			return err
		}
		if closed, err = s.resolveRuleIncidents(ctx, tx, id, v.User); err != nil {
			return err
		}
		return tx.AlertRule.DeleteOne(r).Exec(ctx)
	})
	s.published(closed...)
	if err == nil {
		s.rulesChanged()
	}
	return err
}

func (s *Service) resolveRuleIncidents(ctx context.Context, tx *ent.Tx, ruleID int, by string) ([]*ent.AlertIncident, error) {
	open, err := tx.AlertIncident.Query().Where(alertincident.RuleID(ruleID), alertincident.StatusEQ(alertincident.StatusOPEN)).All(ctx)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Store.Now()
	var out []*ent.AlertIncident
	for _, inc := range open {
		u, err := tx.AlertIncident.UpdateOne(inc).SetStatus(alertincident.StatusRESOLVED).SetResolvedAt(now).
			SetResolution(alertincident.ResolutionRULE_CHANGED).SetResolvedBy(by).SetUpdatedAt(now).Save(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.notifyTx(ctx, tx, u.ID); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// SilenceRule keeps a rule's notices back until a time (nil: lifts the
// silence); its incidents still open and count (admins and operators).
func (s *Service) SilenceRule(ctx context.Context, id int, until *time.Time) (*ent.AlertRule, error) {
	if _, err := requireOperator(ctx, "silence alert rules"); err != nil {
		return nil, err
	}
	var out *ent.AlertRule
	err := s.cfg.Store.Tx(ctx, func(tx *ent.Tx) error {
		r, err := tx.AlertRule.Get(ctx, id)
		if err != nil {
			return err
		}
		u := tx.AlertRule.UpdateOne(r).SetUpdatedAt(s.cfg.Store.Now())
		if until == nil {
			u.ClearSilencedUntil()
		} else {
			u.SetSilencedUntil(*utc(until))
		}
		out, err = u.Save(ctx)
		return err
	})
	return out, err
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC().Truncate(time.Microsecond)
	return &u
}

// IncidentFilter narrows Incidents.
type IncidentFilter struct {
	Status *alertincident.Status
	RuleID *int
	Limit  int
}

// Incidents lists the viewer's tenant's incidents, newest first.
func (s *Service) Incidents(ctx context.Context, f IncidentFilter) ([]*ent.AlertIncident, error) {
	if _, err := auth.Require(ctx); err != nil {
		return nil, err
	}
	q := s.client.AlertIncident.Query()
	if f.Status != nil {
		q.Where(alertincident.StatusEQ(*f.Status))
	}
	if f.RuleID != nil {
		q.Where(alertincident.RuleID(*f.RuleID))
	}
	limit := f.Limit
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	return q.Order(ent.Desc(alertincident.FieldOpenedAt), ent.Desc(alertincident.FieldID)).Limit(limit).All(ctx)
}

// Incident reads one incident.
func (s *Service) Incident(ctx context.Context, id int) (*ent.AlertIncident, error) {
	if _, err := auth.Require(ctx); err != nil {
		return nil, err
	}
	return s.client.AlertIncident.Get(ctx, id)
}

// SilenceIncident keeps an incident's notices back until a time (nil: lifts
// the silence) (admins and operators).
func (s *Service) SilenceIncident(ctx context.Context, id int, until *time.Time) (*ent.AlertIncident, error) {
	if _, err := requireOperator(ctx, "silence alert incidents"); err != nil {
		return nil, err
	}
	var out *ent.AlertIncident
	err := s.cfg.Store.Tx(ctx, func(tx *ent.Tx) error {
		if _, err := tx.AlertIncident.Get(ctx, id); err != nil {
			return err
		}
		u := tx.AlertIncident.UpdateOneID(id).SetUpdatedAt(s.cfg.Store.Now())
		if until == nil {
			u.ClearSilencedUntil()
		} else {
			u.SetSilencedUntil(*utc(until))
		}
		var err error
		if out, err = u.Save(ctx); err != nil {
			return err
		}
		return s.notifyTx(ctx, tx, id)
	})
	s.published(out)
	return out, err
}

// ResolveIncident closes an open incident by hand (admins and operators):
// a condition nothing will clear (a node that will not come back). No
// recovery notice is sent.
func (s *Service) ResolveIncident(ctx context.Context, id int) (*ent.AlertIncident, error) {
	v, err := requireOperator(ctx, "resolve alert incidents")
	if err != nil {
		return nil, err
	}
	var out *ent.AlertIncident
	err = s.cfg.Store.Tx(ctx, func(tx *ent.Tx) error {
		inc, err := tx.AlertIncident.Get(ctx, id)
		if err != nil {
			return err
		}
		if inc.Status != alertincident.StatusOPEN {
			return invalid("id", "incident %d is already resolved", id)
		}
		now := s.cfg.Store.Now()
		if out, err = tx.AlertIncident.UpdateOne(inc).SetStatus(alertincident.StatusRESOLVED).SetResolvedAt(now).
			SetResolution(alertincident.ResolutionMANUAL).SetResolvedBy(v.User).SetUpdatedAt(now).Save(ctx); err != nil {
			return err
		}
		return s.notifyTx(ctx, tx, id)
	})
	s.published(out)
	return out, err
}

// BizID is the biz_id of an incident's delivery tasks.
func BizID(incidentID int) string { return fmt.Sprintf("alert-incident-%d", incidentID) }

// Deliveries lists the delivery tasks of an incident the viewer may see,
// newest first.
func (s *Service) Deliveries(ctx context.Context, incidentID int) ([]*ent.Task, error) {
	return s.client.Task.Query().
		Where(task.BizID(BizID(incidentID)), task.Type(DeliverType)).
		Order(ent.Desc(task.FieldID)).
		Limit(100).
		All(ctx)
}

// notifyTx tells other nodes, if and only if tx commits, that an incident
// changed (PostgreSQL; SQLite has one process).
func (s *Service) notifyTx(ctx context.Context, tx *ent.Tx, id int) error {
	if !s.cfg.Store.Postgres() {
		return nil
	}
	return notifyIncident(ctx, tx, s.cfg.Node, id)
}

// published tells this process's subscribers about committed changes.
func (s *Service) published(incs ...*ent.AlertIncident) {
	for _, inc := range incs {
		if inc != nil {
			s.cfg.Hub.Publish(inc)
		}
	}
}
