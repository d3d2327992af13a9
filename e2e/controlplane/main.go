// Command controlplane is a multi-call binary holding the pieces of a real
// Kubernetes control plane for Moldau's end-to-end tests: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, all
// built from their published Go modules at the versions pinned in go.mod.
//
// Dispatch is on argv[0]'s base name (symlinks named after a component), or
// else on the first argument:
//
//	controlplane kube-apiserver --etcd-servers=...
//	ln -s controlplane kubectl && ./kubectl get pods
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	_ "time/tzdata" // CronJob time zones (as the upstream mains do)

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"

	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

var commands = map[string]func(){
	"etcd": func() {
		etcdmain.Main(os.Args)
	},
	"kube-apiserver": func() {
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	},
	"kube-controller-manager": func() {
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	},
	"kube-scheduler": func() {
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	},
	"kubectl": func() {
		logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
		command := kubectlcmd.NewDefaultKubectlCommand()
		if err := cli.RunNoErrOutput(command); err != nil {
			kubectlutil.CheckErr(err)
		}
	},
}

func usage() {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: controlplane {%s} [args...]\n", strings.Join(names, "|"))
	os.Exit(2)
}

func main() {
	name := filepath.Base(os.Args[0])
	if run, ok := commands[name]; ok {
		run()
		return
	}
	if len(os.Args) < 2 {
		usage()
	}
	run, ok := commands[os.Args[1]]
	if !ok {
		usage()
	}
	// The components parse os.Args[1:]; make it look like a direct call.
	os.Args = append([]string{os.Args[1]}, os.Args[2:]...)
	run()
}
