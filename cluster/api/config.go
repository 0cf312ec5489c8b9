package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// Class is a reconcile class as GET /v1/classes shows it and PUT
// /v1/classes/{name} takes it: durations are Go duration strings ("15s",
// "5m").
type Class struct {
	Name             string     `json:"name"`
	Description      string     `json:"description,omitempty"`
	PullInterval     string     `json:"pull_interval"`
	ProbeInterval    string     `json:"probe_interval"`
	ReportInterval   string     `json:"report_interval"`
	Retry            ClassRetry `json:"retry"`
	UnreachableAfter string     `json:"unreachable_after"`
	ProgressDeadline string     `json:"progress_deadline"`
	// Source is "built-in" for a class of the servers' built-in set that
	// nobody wrote, "written" for one an operator wrote (meteor class
	// apply); only written classes can be deleted. Ignored in a PUT.
	Source string `json:"source,omitempty"`
	// Actor wrote it at UpdatedAt, Raft index Index (written classes).
	Actor     string     `json:"actor,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	Index     uint64     `json:"index,omitempty"`
}

// ClassRetry is a class's retry backoff.
type ClassRetry struct {
	Base   string  `json:"base"`
	Max    string  `json:"max"`
	Jitter float64 `json:"jitter"`
}

// Class sources.
const (
	ClassBuiltin = "built-in"
	ClassWritten = "written"
)

// ClassList answers GET /v1/classes: the classes in effect, by name.
type ClassList struct {
	Classes []Class `json:"classes"`
}

// ClassOf returns c as the API shows it.
func ClassOf(c intent.Class) Class {
	return Class{
		Name: c.Name, Description: c.Description,
		PullInterval: c.PullInterval.String(), ProbeInterval: c.ProbeInterval.String(), ReportInterval: c.ReportInterval.String(),
		Retry:            ClassRetry{Base: c.RetryBase.String(), Max: c.RetryMax.String(), Jitter: c.RetryJitter},
		UnreachableAfter: c.UnreachableAfter.String(), ProgressDeadline: c.ProgressDeadline.String(),
	}
}

// Intent returns the class the API form describes, or what is wrong with
// its durations (Validate checks the rest).
func (c Class) Intent() (intent.Class, error) {
	out := intent.Class{Name: c.Name, Description: c.Description, RetryJitter: c.Retry.Jitter}
	var errs []string
	for _, f := range []struct {
		what, s string
		to      *time.Duration
	}{
		{"pull_interval", c.PullInterval, &out.PullInterval},
		{"probe_interval", c.ProbeInterval, &out.ProbeInterval},
		{"report_interval", c.ReportInterval, &out.ReportInterval},
		{"retry.base", c.Retry.Base, &out.RetryBase},
		{"retry.max", c.Retry.Max, &out.RetryMax},
		{"unreachable_after", c.UnreachableAfter, &out.UnreachableAfter},
		{"progress_deadline", c.ProgressDeadline, &out.ProgressDeadline},
	} {
		d, err := time.ParseDuration(f.s)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %q is not a duration such as 30s or 5m", f.what, f.s))
			continue
		}
		*f.to = d
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("class %q: %s", c.Name, strings.Join(errs, "; "))
	}
	return out, nil
}

// Classes lists the reconcile classes in effect.
func (c *Client) Classes(ctx context.Context, o ReadOptions) (*ClassList, error) {
	var out ClassList
	err := c.do(ctx, http.MethodGet, "/v1/classes", o.query(), nil, nil, &out)
	return &out, err
}

// PutClass writes a class, creating or replacing the one of its name, and
// returns it as committed (the write's Raft index in Index).
func (c *Client) PutClass(ctx context.Context, class Class) (*Class, error) {
	body, err := jsonBody(class)
	if err != nil {
		return nil, err
	}
	var out Class
	err = c.do(ctx, http.MethodPut, "/v1/classes/"+url.PathEscape(class.Name), nil, http.Header{"Content-Type": {"application/json"}}, body, &out)
	return &out, err
}

// DeleteClass deletes a written class; a built-in class of that name
// takes its place again.
func (c *Client) DeleteClass(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/classes/"+url.PathEscape(name), nil, nil, nil, nil)
}

// MaintenanceWindow is a maintenance window as GET /v1/maintenance-windows
// shows it and PUT /v1/maintenance-windows/{name} takes it.
type MaintenanceWindow struct {
	Name        string            `json:"name"`
	Description string            `json:"description,omitempty"`
	Selector    map[string]string `json:"selector,omitempty"`
	// Schedule is when it is open, in each device's local time.
	Schedule []WindowSpan `json:"schedule"`
	// Actor wrote it at UpdatedAt, Raft index Index. Ignored in a PUT.
	Actor     string     `json:"actor,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	Index     uint64     `json:"index,omitempty"`
}

// WindowSpan is one part of a schedule: days such as "mon-fri" or
// "sat,sun", from and to as "HH:MM" (to before from: the next day).
type WindowSpan struct {
	Days string `json:"days"`
	From string `json:"from"`
	To   string `json:"to"`
}

// MaintenanceWindowList answers GET /v1/maintenance-windows.
type MaintenanceWindowList struct {
	Windows []MaintenanceWindow `json:"windows"`
}

// WindowOf returns w as the API shows it.
func WindowOf(w intent.MaintenanceWindow) MaintenanceWindow {
	out := MaintenanceWindow{Name: w.Name, Description: w.Description, Selector: w.Selector}
	for _, s := range w.Spans {
		out.Schedule = append(out.Schedule, WindowSpan{Days: intent.FormatDays(s.Days),
			From: fmt.Sprintf("%02d:%02d", s.Start/60, s.Start%60), To: fmt.Sprintf("%02d:%02d", s.End/60, s.End%60)})
	}
	return out
}

// Intent returns the window the API form describes, validated.
func (w MaintenanceWindow) Intent() (intent.MaintenanceWindow, error) {
	doc, err := json.Marshal(map[string]any{"kind": "maintenance-window", "name": w.Name, "description": w.Description, "selector": w.Selector, "schedule": w.Schedule})
	if err != nil {
		return intent.MaintenanceWindow{}, err
	}
	ws, err := intent.ParseMaintenanceWindows(doc)
	if err != nil {
		return intent.MaintenanceWindow{}, err
	}
	return ws[0], nil
}

// MaintenanceWindows lists the maintenance windows.
func (c *Client) MaintenanceWindows(ctx context.Context, o ReadOptions) (*MaintenanceWindowList, error) {
	var out MaintenanceWindowList
	err := c.do(ctx, http.MethodGet, "/v1/maintenance-windows", o.query(), nil, nil, &out)
	return &out, err
}

// PutMaintenanceWindow writes a maintenance window and returns it as
// committed.
func (c *Client) PutMaintenanceWindow(ctx context.Context, w MaintenanceWindow) (*MaintenanceWindow, error) {
	body, err := jsonBody(w)
	if err != nil {
		return nil, err
	}
	var out MaintenanceWindow
	err = c.do(ctx, http.MethodPut, "/v1/maintenance-windows/"+url.PathEscape(w.Name), nil, http.Header{"Content-Type": {"application/json"}}, body, &out)
	return &out, err
}

// DeleteMaintenanceWindow deletes a maintenance window.
func (c *Client) DeleteMaintenanceWindow(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/maintenance-windows/"+url.PathEscape(name), nil, nil, nil, nil)
}
