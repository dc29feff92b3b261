package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/api"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// defaultAPIListen is where `agentsaga serve` and `agentsaga dev` serve
// the HTTP API: loopback, unless told otherwise.
const defaultAPIListen = "127.0.0.1:8480"

func serveCommand() *cobra.Command {
	var listen, tlsCert, tlsKey string
	cmd := &cobra.Command{
		Use:   "serve [--listen HOST:PORT] [--tls-cert FILE --tls-key FILE]",
		Short: "Serve the HTTP API (docs/api.md) and each run's live page; stateless, so many may run behind a load balancer",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (tlsCert == "") != (tlsKey == "") {
				return errors.New("serve: --tls-cert and --tls-key go together")
			}
			ctx := cmd.Context()
			cfg := worker.ConfigFromEnv()
			c, err := worker.Dial(ctx, cfg)
			if err != nil {
				return err
			}
			defer c.Close()
			store, err := ledger.Open(ctx, cfg.DatabaseURL)
			if err != nil {
				return err
			}
			defer store.Close()
			listener, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("serve: listen on %s: %w", listen, err)
			}
			scheme := "http"
			if tlsCert != "" {
				scheme = "https"
			} else if !isLoopback(listener.Addr()) {
				fmt.Fprintf(cmd.ErrOrStderr(), "serve: warning: %s is not loopback and there is no TLS: keys cross the network in clear (--tls-cert, --tls-key)\n", listener.Addr())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "serving the API at %s://%s/v1 (OpenAPI at /v1/openapi.json; a run's live page at /runs/RUN_ID)\n", scheme, listener.Addr())
			return serveAPI(ctx, listener, c, store, cfg.Namespace, tlsCert, tlsKey, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&listen, "listen", defaultAPIListen, "the address to listen on; loopback unless told otherwise")
	cmd.Flags().StringVar(&tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM; with --tls-key)")
	cmd.Flags().StringVar(&tlsKey, "tls-key", "", "the certificate's private key (PEM)")
	return cmd
}

// serveAPI serves the API on listener until ctx ends, then lets the
// requests in flight finish for a few seconds (event streams end with the
// context). One runevents.Hub serves the process's event streams.
func serveAPI(ctx context.Context, listener net.Listener, c client.Client, store *ledger.Store, namespace, tlsCert, tlsKey string, logs io.Writer) error {
	handler, stop, err := newAPI(ctx, c, store, namespace, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		return err
	}
	defer stop()
	server := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute, // a body; an event stream's response has no deadline
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan error, 1)
	go func() {
		if tlsCert != "" {
			done <- server.ServeTLS(listener, tlsCert, tlsKey)
		} else {
			done <- server.Serve(listener)
		}
	}()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = server.Shutdown(shutdown)
	return nil
}

// newAPI builds the API over a Temporal client and the ledger, its
// starts going through startRun as `agentsaga run`'s do, and runs its hub
// until stop.
func newAPI(ctx context.Context, c client.Client, store *ledger.Store, namespace string, logger *slog.Logger) (http.Handler, func(), error) {
	hub := runevents.NewHub(ledgerdb.Of(store).Pool())
	ctx, cancel := context.WithCancel(ctx)
	hubDone := make(chan struct{})
	go func() {
		defer close(hubDone)
		hub.Run(ctx, func(err error) { logger.Warn("api: the event hub's LISTEN failed; reconnecting", "error", err) })
	}()
	stop := func() { cancel(); <-hubDone }
	handler, err := api.New(api.Config{Store: store, Client: c, Hub: hub, Logger: logger, Namespace: namespace,
		Start: func(ctx context.Context, id string, spec workflows.RunSpec, account string) (*agentsaga.Run, error) {
			return startRun(ctx, c, store, namespace, id, spec, account, 0)
		}})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return handler, stop, nil
}

func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
