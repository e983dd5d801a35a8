package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"
)

// newHealthcheckCmd is `toolgate healthcheck`: the container HEALTHCHECK
// (distroless and scratch images have no curl). It reads no store and
// sends no credentials: /healthz is public.
func newHealthcheckCmd() *cobra.Command {
	var target string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck [--url URL]",
		Short: "Exit 0 when a gateway's /healthz answers 200 (for a container HEALTHCHECK)",
		Long: `GET the gateway's /healthz and exit 0 on 200 OK, 1 otherwise (no answer within --timeout, or
another status). It is what the Dockerfile's HEALTHCHECK runs, since the image has no curl.`,
		Example: `  toolgate healthcheck
  toolgate healthcheck --url http://127.0.0.1:7070/healthz --timeout 2s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			u, err := url.Parse(target)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usage("--url %q: want an http(s) URL such as http://127.0.0.1:7070/healthz", target)
			}
			if timeout <= 0 {
				return usage("--timeout %s: want a positive duration", timeout)
			}
			return healthcheck(cmd.Context(), cmd.OutOrStdout(), u.String(), timeout)
		},
	}
	cmd.Flags().StringVar(&target, "url", "http://127.0.0.1:7070/healthz", "the /healthz URL")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}

// healthcheck GETs target: nil on 200, else a failure naming the cause.
func healthcheck(ctx context.Context, out io.Writer, target string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return failure("healthcheck: %v", err)
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		return failure("healthcheck %s: %v", target, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return failure("healthcheck %s: %s", target, resp.Status)
	}
	fmt.Fprintln(out, "ok")
	return nil
}
