// Command coredns is CoreDNS, built from its published Go module at the
// version pinned in go.mod, with only the plugins the e2e test plane's
// cluster DNS uses: `kubernetes` (Services, headless per-pod names and pod
// records read from the API server, as a cluster's DNS add-on serves them),
// `bind` (the one address it listens on), `errors` and `log`, and `ready` (the readiness endpoint
// controlplane-up.sh waits for). A module of its own rather than a command of
// the control plane's multi-call binary: CoreDNS pins newer gRPC and client
// versions than the Kubernetes release the plane is built from.
package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
