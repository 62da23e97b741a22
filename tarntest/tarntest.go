package tarntest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// ErrNotReady means tarn did not answer /readyz with 200 within the startup timeout, or stopped
// before it did; use errors.Is. The error says which and ends with the container's output.
var ErrNotReady = errors.New("tarntest: tarn did not become ready")

// httpPort is where tarn's image listens (its TARN_HTTP) on a bridge network.
const httpPort = "8080/tcp"

// configPath is where WithConfig's file goes in the container.
const configPath = "/etc/tarn/config.yaml"

// Container is a running tarn container. Terminate (of the embedded testcontainers container)
// stops and removes it.
type Container struct {
	*testcontainers.DockerContainer
	// URL is tarn's HTTP base URL as this process reaches it, e.g. http://127.0.0.1:32768.
	URL string
	// Client reads the views at URL.
	Client *Client
}

// Run starts image with the options, waits until tarn answers /readyz with 200, and returns
// the container. On error nothing it started is left running.
func Run(ctx context.Context, image string, opts ...Option) (*Container, error) {
	cfg := newConfig(opts)
	base, err := cfg.listen()
	if err != nil {
		return nil, err
	}
	c, err := testcontainers.Run(ctx, image, cfg.customizers(base)...)
	if err != nil {
		err = fmt.Errorf("tarntest: run %s: %w%s", image, err, outputTail(ctx, c))
		if c != nil {
			c.Terminate(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	url, err := base(ctx, c)
	if err != nil {
		c.Terminate(context.WithoutCancel(ctx))
		return nil, err
	}
	return &Container{DockerContainer: c, URL: url, Client: NewClient(url)}, nil
}

// baseFunc finds tarn's HTTP base URL once the container exists.
type baseFunc func(context.Context, wait.StrategyTarget) (string, error)

// listen decides where tarn listens: on the host network, at --http from the command or else a
// free loopback port set as TARN_HTTP; on a bridge, at the image's port 8080, published.
func (c *config) listen() (baseFunc, error) {
	if !c.hostNetwork {
		return func(ctx context.Context, t wait.StrategyTarget) (string, error) {
			host, err := t.Host(ctx)
			if err != nil {
				return "", err
			}
			port, err := t.MappedPort(ctx, httpPort)
			if err != nil {
				return "", err
			}
			return "http://" + net.JoinHostPort(host, port.Port()), nil
		}, nil
	}
	addr, ok := flagValue(c.cmd, "http")
	if !ok {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr = "127.0.0.1:" + strconv.Itoa(port)
		c.env["TARN_HTTP"] = addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("tarntest: --http %q: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, port)
	return func(context.Context, wait.StrategyTarget) (string, error) { return url, nil }, nil
}

// customizers turns the config into testcontainers' terms.
func (c *config) customizers(base baseFunc) []testcontainers.ContainerCustomizer {
	if c.configYAML != "" {
		c.env["TARN_CONFIG"] = configPath
	}
	cz := []testcontainers.ContainerCustomizer{
		testcontainers.WithEnv(c.env),
		testcontainers.WithCmd(c.cmd...),
		testcontainers.WithWaitStrategy(readyz{base: base, limit: c.timeout}),
	}
	if len(c.entrypoint) > 0 {
		cz = append(cz, testcontainers.WithEntrypoint(c.entrypoint...))
	}
	if c.configYAML != "" {
		cz = append(cz, testcontainers.WithFiles(testcontainers.ContainerFile{
			Reader: strings.NewReader(c.configYAML), ContainerFilePath: configPath, FileMode: 0o644}))
	}
	if c.hostNetwork {
		cz = append(cz, testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.NetworkMode = "host" }))
	} else {
		cz = append(cz, testcontainers.WithExposedPorts(httpPort))
	}
	if len(c.networks) > 0 {
		cz = append(cz, testcontainers.CustomizeRequestOption(func(req *testcontainers.GenericContainerRequest) error {
			req.Networks = append(req.Networks, c.networks...)
			if req.NetworkAliases == nil {
				req.NetworkAliases = map[string][]string{}
			}
			for n, a := range c.aliases {
				req.NetworkAliases[n] = append(req.NetworkAliases[n], a...)
			}
			return nil
		}))
	}
	if c.logs != nil {
		cz = append(cz, testcontainers.WithLogConsumers(logWriter{c.logs}))
	}
	return append(cz, c.extra...)
}

// flagValue finds --name or -name in args, as "--name value" or "--name=value".
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("tarntest: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// readyz waits until GET /readyz answers 200, and gives up at once when the container stops:
// tarn exits on a bad setting, and waiting out the limit would only hide why.
type readyz struct {
	base  baseFunc
	limit time.Duration
}

func (r readyz) WaitUntilReady(ctx context.Context, target wait.StrategyTarget) error {
	ctx, cancel := context.WithTimeout(ctx, r.limit)
	defer cancel()
	last := errors.New("no answer yet")
	for {
		if st, err := target.State(ctx); err == nil && !st.Running {
			return fmt.Errorf("%w: the container stopped (exit code %d) before /readyz answered 200", ErrNotReady, st.ExitCode)
		}
		if base, err := r.base(ctx, target); err != nil {
			last = err
		} else if last = ready(ctx, base); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w within %s: last answer: %v", ErrNotReady, r.limit, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// ready is nil when GET base/readyz answers 200, else says what it answered.
func ready(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// outputTail is the last lines of the container's output, for errors: why tarn did not start
// is in its log.
func outputTail(ctx context.Context, c *testcontainers.DockerContainer) string {
	if c == nil {
		return ""
	}
	rc, err := c.Logs(context.WithoutCancel(ctx))
	if err != nil {
		return ""
	}
	defer rc.Close()
	out, _ := io.ReadAll(rc)
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "\ncontainer output (tail):\n" + strings.Join(lines, "\n")
}

// logWriter copies the container's output to a writer.
type logWriter struct{ w io.Writer }

func (l logWriter) Accept(entry testcontainers.Log) { l.w.Write(entry.Content) }
