package cluster

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"
)

// dashboardPath is the Grafana dashboard docs/operations.md points to.
const dashboardPath = "../docs/grafana/meteor-dashboard.json"

// grafanaPanel is what the tests read of a Grafana panel.
type grafanaPanel struct {
	Title      string          `json:"title"`
	Type       string          `json:"type"`
	Datasource *grafanaSource  `json:"datasource"`
	Targets    []grafanaTarget `json:"targets"`
	Panels     []grafanaPanel  `json:"panels"` // a collapsed row's
}

type grafanaSource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type grafanaTarget struct {
	Expr       string         `json:"expr"`
	Datasource *grafanaSource `json:"datasource"`
}

type grafanaDashboard struct {
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Type  string `json:"type"`
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

// metricName finds the metric names in a PromQL expression: every Meteor
// metric and the Go and process collectors' are in these namespaces.
var metricName = regexp.MustCompile(`\b(?:meteor|go|process)_[a-zA-Z0-9_:]+`)

// dashboardExprs reads the dashboard and returns every query it makes
// (panel targets and template variables), by where it is, after checking
// that it queries through its Prometheus data source variable.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if d.Title == "" {
		t.Errorf("%s: no title", dashboardPath)
	}
	hasSource := false
	exprs := map[string]string{}
	for _, v := range d.Templating.List {
		switch {
		case v.Type == "datasource" && v.Name == "datasource" && v.Query == "prometheus":
			hasSource = true
		case v.Type == "query":
			q, _ := v.Query.(map[string]any)
			s, _ := q["query"].(string)
			exprs["variable "+v.Name] = s
		}
	}
	if !hasSource {
		t.Errorf("%s: no Prometheus data source variable named datasource", dashboardPath)
	}
	viaVariable := func(s *grafanaSource) bool { return s != nil && s.Type == "prometheus" && s.UID == "${datasource}" }
	var walk func([]grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if !viaVariable(p.Datasource) {
				t.Errorf("panel %q: data source %+v, want the ${datasource} variable", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q queries nothing", p.Title)
			}
			for i, tg := range p.Targets {
				if !viaVariable(tg.Datasource) {
					t.Errorf("panel %q target %d: data source %+v, want the ${datasource} variable", p.Title, i, tg.Datasource)
				}
				exprs["panel "+p.Title+" target "+string(rune('A'+i))] = tg.Expr
			}
		}
	}
	walk(d.Panels)
	return exprs
}

// TestGrafanaDashboardParses: the dashboard is valid JSON, queries through
// its data source variable, and each query names at least one metric of
// ours (so one whose name lost its prefix is not silently unchecked by
// checkDashboardMetrics).
func TestGrafanaDashboardParses(t *testing.T) {
	exprs := dashboardExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("%d queries in the dashboard", len(exprs))
	}
	for where, e := range exprs {
		if len(metricName.FindAllString(e, -1)) == 0 {
			t.Errorf("%s: %q names no meteor_, go_ or process_ metric", where, e)
		}
	}
}

// checkDashboardMetrics checks that every metric the dashboard queries is
// in a real server's /metrics (TestMetricsFollowAgents), so that renaming
// a metric without the dashboard fails.
func checkDashboardMetrics(t *testing.T, sc *scrape) {
	t.Helper()
	var missing []string
	for where, e := range dashboardExprs(t) {
		for _, name := range metricName.FindAllString(e, -1) {
			if !sc.samples[name] {
				missing = append(missing, name+" ("+where+")")
			}
		}
	}
	slices.Sort(missing)
	for _, m := range missing {
		t.Errorf("the dashboard queries %s, which /metrics does not serve", m)
	}
}
