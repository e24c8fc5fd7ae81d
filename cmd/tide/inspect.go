package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tidesync/tide/core"
)

// listFlag is a flag given any number of times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ", ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// inspectResult is what tide inspect --json prints: each node's report.
type inspectResult struct {
	Reports []core.InspectReport `json:"reports"`
}

// inspectFlags: tide inspect asks the status endpoint of one or more nodes
// (--url, repeated) why a principal did or did not get a row.
func inspectFlags(fs *flag.FlagSet) func(*env) error {
	var urls, headers listFlag
	fs.Var(&urls, "url", "a node's status page URL, e.g. https://app.example/tide/status (repeat for each node)")
	fs.Var(&headers, "header", `a request header for the status page's authorization, "Name: value" (repeatable)`)
	principal := fs.String("principal", "", "the principal's id (required)")
	resource := fs.String("resource", "", "the resource (required)")
	key := fs.String("key", "", "the row's primary key (required)")
	origin := fs.String("origin", "", "only the connections of this device origin")
	timeout := fs.Duration("timeout", 15*time.Second, "how long to wait for each node")
	return func(e *env) error {
		switch {
		case len(urls) == 0:
			return usageError{"--url is required (the status page of each node to ask)"}
		case *principal == "" || *resource == "" || *key == "":
			return usageError{"--principal, --resource and --key are required"}
		}
		hdr := http.Header{}
		for _, h := range headers {
			name, value, ok := strings.Cut(h, ":")
			if !ok || strings.TrimSpace(name) == "" {
				return usageError{fmt.Sprintf("--header %q: want \"Name: value\"", h)}
			}
			hdr.Add(strings.TrimSpace(name), strings.TrimSpace(value))
		}
		q := url.Values{"principal": {*principal}, "resource": {*resource}, "key": {*key}}
		if *origin != "" {
			q.Set("origin", *origin)
		}
		client := &http.Client{Timeout: *timeout}
		var res inspectResult
		for _, u := range urls {
			rep, err := askInspect(e, client, u, q, hdr)
			if err != nil {
				return err
			}
			res.Reports = append(res.Reports, rep)
		}
		if e.json {
			return e.printJSON(res)
		}
		printInspect(e.out, res.Reports)
		return nil
	}
}

// askInspect asks one node's <status>/inspect.
func askInspect(e *env, client *http.Client, status string, q url.Values, hdr http.Header) (core.InspectReport, error) {
	u, err := url.Parse(status)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return core.InspectReport{}, usageError{fmt.Sprintf("--url %q: want the status page's http(s) URL", status)}
	}
	if !strings.HasSuffix(u.Path, "/inspect") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/inspect"
	}
	u.RawQuery = q.Encode()
	where := u.Scheme + "://" + u.Host + u.Path
	req, err := http.NewRequestWithContext(e.ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return core.InspectReport{}, err
	}
	req.Header = hdr.Clone()
	resp, err := client.Do(req)
	if err != nil {
		return core.InspectReport{}, fmt.Errorf("asking %s: %w", where, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return core.InspectReport{}, fmt.Errorf("reading %s: %w", where, err)
	}
	if resp.StatusCode != http.StatusOK {
		var pe struct{ Code, Message, Detail string }
		if json.Unmarshal(body, &pe) == nil && pe.Code != "" {
			return core.InspectReport{}, fmt.Errorf("%s: %s: %s: %s (%s)", where, resp.Status, pe.Code, pe.Message, pe.Detail)
		}
		return core.InspectReport{}, fmt.Errorf("%s: %s: %s", where, resp.Status, strings.TrimSpace(string(body)))
	}
	var rep core.InspectReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return core.InspectReport{}, fmt.Errorf("%s: not an inspect report: %w", where, err)
	}
	return rep, nil
}

// printInspect prints one line per node and subscription.
func printInspect(w io.Writer, reps []core.InspectReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tORIGIN\tSUB\tSCOPE\tSTATE\tVERDICT\tPOLICY\tFILTER\tDELIVERED\tLAG\tQUEUED\tREASON")
	for _, r := range reps {
		last := "unknown"
		if r.LastChange != nil {
			last = fmt.Sprint(*r.LastChange)
		}
		fmt.Fprintf(tw, "%s\t\t\t%s %s\t\t%s\t\t\t\t\t\trow %s, last change %s, head %d\n", r.Node, r.Resource, r.Key, r.Verdict, r.Row, last, r.Head)
		for _, c := range r.Connections {
			for _, s := range c.Subscriptions {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n",
					r.Node, c.Origin, s.ID, s.Scope, s.State, s.Verdict, s.Policy, s.Filter, s.Delivered, s.Lag, s.Queued, s.Reason)
			}
		}
	}
	_ = tw.Flush()
}
