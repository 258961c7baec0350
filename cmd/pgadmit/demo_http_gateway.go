package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The HTTP demo's cast: a fake upstream that streams tokens like a chat
// completions API, and the gateway in front of it, admitting each request
// with package httpadmit.

// chatRequest is the part of a chat completions request the demo reads.
type chatRequest struct {
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	Prompt    string `json:"prompt"`
}

// httpPlan is an API key's plan.
type httpPlan struct {
	name                   string
	requestsMin, tokensMin float64
}

var (
	httpPlanPro  = httpPlan{name: "pro", requestsMin: 60, tokensMin: 20_000}
	httpPlanFree = httpPlan{name: "free", requestsMin: 10, tokensMin: 3_000}
)

// httpModel is an upstream model: its concurrency limit at the gateway and
// how fast it streams.
type httpModel struct {
	name       string
	concurrent float64
	perToken   time.Duration
}

var httpModels = []httpModel{
	{name: "large", concurrent: 8, perToken: 2 * time.Millisecond},
	{name: "small", concurrent: 12, perToken: 500 * time.Microsecond},
}

// upstreamHandler streams a completion as server-sent events: one event
// per token, then a usage event and [DONE]. It writes between a quarter and
// all of max_tokens, and stops when the caller goes away.
func upstreamHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req chatRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.MaxTokens < 1 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		perToken := time.Millisecond
		for _, m := range httpModels {
			if strings.HasSuffix(req.Model, m.name) {
				perToken = m.perToken
			}
		}
		prompt := len(strings.Fields(req.Prompt))
		completion := req.MaxTokens/4 + mrand.IntN(req.MaxTokens-req.MaxTokens/4+1)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		// Tokens come in chunks of 8, as upstreams batch them.
		for sent := 0; sent < completion; sent += 8 {
			n := min(8, completion-sent)
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}],\"tokens\":%d}\n\n", strings.Repeat("tok ", n), n)
			if rc.Flush() != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Duration(n) * perToken):
			}
		}
		fmt.Fprintf(w, "data: {\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", prompt, completion, prompt+completion)
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
}

// gatewayKinds are the kinds of limits gatewayLimits enforces, for Limiter.Warm (which puts
// them on scopes of its own): requests and tokens per minute of a key, a model's concurrency.
func gatewayKinds() []ratelimit.Limit {
	key := ratelimit.Scope{Type: "api_key", Key: "warm-up"}
	model := ratelimit.Scope{Type: "model", Key: "warm-up"}
	return []ratelimit.Limit{
		{Scope: key, Metric: ratelimit.MetricRequests, Limit: 1, Amount: 1},
		{Scope: key, Metric: ratelimit.MetricTokens, Limit: 1, Amount: 1},
		{Scope: model, Metric: ratelimit.MetricConcurrent, Limit: 1, Amount: 1, LeaseTTL: 30 * time.Second},
	}
}

// gatewayLimits maps a request to its limits: its API key's plan (requests
// and tokens per minute, the estimate being the prompt plus max_tokens) and
// its model's concurrency, which fails open. Two limits are rolled out in
// shadow: half the plan's tokens per minute (on the plan's own counter) and
// 150 requests per minute per model (a counter of its own).
func gatewayLimits(prefix string, plans map[string]httpPlan) httpadmit.LimitsFunc {
	return func(r *http.Request) ([]httpadmit.Limit, error) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		plan, known := plans[key]
		if !ok || !known {
			return nil, fmt.Errorf("%w: unknown API key", httpadmit.ErrBadRequest)
		}
		body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, 1<<20))
		if err != nil {
			return nil, fmt.Errorf("%w: reading the body: %w", httpadmit.ErrBadRequest, err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req chatRequest
		if err := json.Unmarshal(body, &req); err != nil || req.Model == "" || req.MaxTokens < 1 {
			return nil, fmt.Errorf("%w: want a JSON body with a model and max_tokens", httpadmit.ErrBadRequest)
		}
		var model *httpModel
		for i := range httpModels {
			if req.Model == httpModels[i].name {
				model = &httpModels[i]
			}
		}
		if model == nil {
			return nil, fmt.Errorf("%w: unknown model %q", httpadmit.ErrBadRequest, req.Model)
		}
		estimate := float64(len(strings.Fields(req.Prompt)) + req.MaxTokens)
		apiKey := ratelimit.Scope{Type: "api_key", Key: prefix + key}
		modelScope := ratelimit.Scope{Type: "model", Key: prefix + model.name}
		return []httpadmit.Limit{
			{Limit: ratelimit.Limit{Scope: apiKey, Metric: ratelimit.MetricRequests, Limit: plan.requestsMin, Amount: 1}},
			{Limit: ratelimit.Limit{Scope: apiKey, Metric: ratelimit.MetricTokens, Limit: plan.tokensMin, Amount: estimate}},
			{Limit: ratelimit.Limit{Scope: modelScope, Metric: ratelimit.MetricConcurrent, Limit: model.concurrent, Amount: 1, LeaseTTL: 30 * time.Second},
				OnFailure: httpadmit.FailOpen},
			{Limit: ratelimit.Limit{Scope: apiKey, Metric: ratelimit.MetricTokens, Limit: plan.tokensMin / 2, Amount: estimate}, Mode: httpadmit.Shadow},
			{Limit: ratelimit.Limit{Scope: modelScope, Metric: ratelimit.MetricRequests, Limit: 150, Amount: 1}, Mode: httpadmit.Shadow},
		}, nil
	}
}

// proxyHandler forwards a request to the upstream and streams the answer
// back event by event, reporting the tokens spent as they come (so that a
// cut stream commits what the upstream really produced) and the upstream's
// usage at the end. A request the upstream did not serve is discarded.
func proxyHandler(client *http.Client, upstreamURL string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, upstreamURL, r.Body)
		if err != nil {
			_ = httpadmit.Discard(r.Context(), "upstream_request")
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			_ = httpadmit.Discard(r.Context(), "upstream_unreachable")
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			_ = httpadmit.Discard(r.Context(), "upstream_refused")
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		rc := http.NewResponseController(w)
		spent := 0
		lines := bufio.NewScanner(resp.Body)
		for lines.Scan() {
			line := lines.Text()
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				var event struct {
					Tokens int `json:"tokens"`
					Usage  *struct {
						TotalTokens int `json:"total_tokens"`
					} `json:"usage"`
				}
				if json.Unmarshal([]byte(data), &event) == nil {
					spent += event.Tokens
					if event.Usage != nil {
						spent = event.Usage.TotalTokens
					}
					_ = httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: float64(spent)})
				}
			}
			if _, err := io.WriteString(w, line+"\n"); err != nil {
				return // the client is gone: the middleware settles
			}
			if line == "" {
				_ = rc.Flush()
			}
		}
	})
}
