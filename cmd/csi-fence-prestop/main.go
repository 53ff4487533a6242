/*
Copyright 2026 The fence-attacher Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command csi-fence-prestop is the static helper that delivers a pod's
// termination reason to its preStop hook (see pkg/prestop). The webhook
// copies it into each opted-in pod and rewrites the hook to run it:
//
//	csi-fence-prestop install DEST                      (init container: copy itself to DEST)
//	csi-fence-prestop exec --env=NAME -- CMD [ARG...]   (command hook)
//	csi-fence-prestop http-get --header=NAME --port=P [--scheme=HTTP] [--host=H] [--path=/p] [--http-header=N:V]...
//	csi-fence-prestop version                           (also --version)
//
// It never makes a hook fail for the reason's sake: the reason is Unknown
// when the API cannot tell within --timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/prestop"
	"github.com/csi-fence/fence-attacher/pkg/version"
)

func main() {
	klog.InitFlags(nil)
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "csi-fence-prestop:", err)
		os.Exit(1)
	}
}

type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, ",") }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: csi-fence-prestop install|exec|http-get|version ...") //nolint:revive // a usage line: "..." stands for the arguments
	}
	if args[0] == "version" || args[0] == "--version" || args[0] == "-version" {
		fmt.Println("csi-fence-prestop", version.String())
		return nil
	}
	ctx := context.Background()
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	timeout := fs.Duration("timeout", prestop.DefaultTimeout, "bound of the API reads that decide the reason")
	switch args[0] {
	case "install":
		if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 1 {
			return errors.New("usage: csi-fence-prestop install DEST")
		}
		return install(fs.Arg(0))
	case "exec":
		env := fs.String("env", prestop.DefaultEnv, "environment variable that carries the reason")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			return errors.New("exec: no command after --")
		}
		reason := prestop.Reason(ctx, *timeout)
		return execWith(fs.Args(), *env, reason)
	case "http-get":
		header := fs.String("header", prestop.DefaultHeader, "HTTP header that carries the reason")
		var g prestop.HTTPGet
		fs.StringVar(&g.Scheme, "scheme", "HTTP", "HTTP or HTTPS")
		fs.StringVar(&g.Host, "host", "", "host (default 127.0.0.1: the pod's own network namespace)")
		fs.IntVar(&g.Port, "port", 0, "port")
		fs.StringVar(&g.Path, "path", "/", "path")
		var hs headerList
		fs.Var(&hs, "http-header", "NAME:VALUE of the original hook's headers (repeatable)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if g.Port <= 0 {
			return errors.New("http-get: --port is required")
		}
		g.Headers = http.Header{}
		for _, h := range hs {
			k, v, ok := strings.Cut(h, ":")
			if !ok {
				return fmt.Errorf("http-get: --http-header %q is not NAME:VALUE", h)
			}
			g.Headers.Add(k, v)
		}
		reason := prestop.Reason(ctx, *timeout)
		return g.Do(ctx, *header, reason)
	}
	return fmt.Errorf("unknown subcommand %q", args[0])
}

// execWith replaces this process with the original hook, so that the
// kubelet sees the hook's own exit status, output and time.
func execWith(argv []string, env, reason string) error {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	klog.Flush()
	environ := append(os.Environ(), env+"="+reason)
	return syscall.Exec(path, argv, environ)
}

// install copies this binary to dest (the shared emptyDir), atomically so
// that a container never sees half of it, executable by every user.
func install(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dest + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	// Explicitly, whatever the umask: the installer runs as a user of its
	// own, the app containers that run the copy as any other.
	if err := out.Chmod(0o755); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}
