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

// Command csi-fence-sanity runs csi-test's sanity suite and the fence
// sanity suite (pkg/fencesanity) against a CSI driver. Its flags are
// csi-sanity's (--csi.*, --ginkgo.*) plus --fence.*:
//
//	csi-fence-sanity --csi.endpoint=unix:///run/node.sock --csi.controllerendpoint=unix:///run/controller.sock \
//	    --fence.other-node-endpoint=unix:///run/node2.sock \
//	    --fence.io-check-cmd="csi-fence-mock io --state-dir=/var/lib/csi-fence-mock --write"
//
// With --fence.check-unpublish-revokes-access it also checks, through a
// volume it publishes on this host, that a plain ControllerUnpublishVolume
// revokes the node's access: what a driver's owner declares with the
// CSIDriver annotation csi-fence.io/unpublish-revokes-access.
//
// Against a driver without the extension the fence specs are skipped, and
// the run ends with one line saying that no fence spec ran and why; csi-test's capability specs are replaced by versions
// that accept the extension's values. The exit code is 0 when every spec
// passed or was skipped.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/fencesanity"
	"github.com/csi-fence/fence-attacher/pkg/version"
)

// result is the testing.T stand-in Ginkgo reports to.
type result struct{ failed bool }

func (r *result) Fail() { r.failed = true }

func main() {
	os.Exit(run())
}

func run() int {
	showVersion := flag.Bool("version", false, "Print the version and exit")
	config := sanity.NewTestConfig()
	s := func(p *string, name, usage string) { flag.StringVar(p, "csi."+name, *p, usage) }
	d := func(p *time.Duration, name, usage string) { flag.DurationVar(p, "csi."+name, *p, usage) }
	s(&config.Address, "endpoint", "CSI endpoint (node and identity service; the controller service too unless --csi.controllerendpoint)")
	s(&config.ControllerAddress, "controllerendpoint", "CSI controller endpoint")
	s(&config.TargetPath, "mountdir", "Mount point for NodePublish")
	s(&config.StagingPath, "stagingdir", "Mount point for NodeStage if staging is supported")
	s(&config.CreateTargetPathCmd, "createmountpathcmd", "Command to run for target path creation")
	s(&config.CreateStagingPathCmd, "createstagingpathcmd", "Command to run for staging path creation")
	d(&config.CreatePathCmdTimeout, "createpathcmdtimeout", "Timeout for the commands to create target and staging paths")
	s(&config.RemoveTargetPathCmd, "removemountpathcmd", "Command to run for target path removal")
	s(&config.RemoveStagingPathCmd, "removestagingpathcmd", "Command to run for staging path removal")
	d(&config.RemovePathCmdTimeout, "removepathcmdtimeout", "Timeout for the commands to remove target and staging paths")
	s(&config.CheckPathCmd, "checkpathcmd", "Command to run to check a given path. It must print 'file', 'directory', 'not_found', or 'other' on stdout.")
	d(&config.CheckPathCmdTimeout, "checkpathcmdtimeout", "Timeout for the command to check a given path")
	s(&config.SecretsFile, "secrets", "CSI secrets file")
	s(&config.TestVolumeAccessType, "testvolumeaccesstype", "Volume capability access type, valid values are mount or block")
	s(&config.TestInvalidListVolumesStartingToken, "testinvalidlistvolumesstartingtoken", "Invalid starting token for ListVolumes")
	flag.Int64Var(&config.TestVolumeSize, "csi.testvolumesize", config.TestVolumeSize, "Base volume size used for provisioned volumes")
	flag.Int64Var(&config.TestVolumeExpandSize, "csi.testvolumeexpandsize", config.TestVolumeExpandSize, "Target size for expanded volumes")
	s(&config.TestVolumeParametersFile, "testvolumeparameters", "YAML file of volume parameters for provisioned volumes")
	s(&config.TestVolumeMutableParametersFile, "testvolumemutableparameters", "YAML file of mutable parameters for modifying volumes")
	s(&config.TestSnapshotParametersFile, "testsnapshotparameters", "YAML file of snapshot parameters for provisioned snapshots")
	flag.BoolVar(&config.TestNodeVolumeAttachLimit, "csi.testnodevolumeattachlimit", false, "Test node volume attach limit")
	flag.Var(flag.Lookup("ginkgo.junit-report").Value, "csi.junitfile", "JUnit XML output file where test results will be written (deprecated: use ginkgo.junit-report instead)")

	var fc fencesanity.Config
	ioCmd := flag.String("fence.io-check-cmd", "", "Command that tries a write as a workload on a node: run with NODE-ID VOLUME-ID TARGET-PATH appended, it must print 'accepted' or 'refused'. Without it, the specs that check a fence cuts I/O are skipped.")
	ioTimeout := flag.Duration("fence.io-check-timeout", fencesanity.DefaultIOTimeout, "Timeout of one --fence.io-check-cmd run, and of each write and read of --fence.check-unpublish-revokes-access")
	flag.StringVar(&fc.OtherNodeAddress, "fence.other-node-endpoint", "", "CSI endpoint of the node plugin of a second node. Without it, the specs that move a volume between nodes or share it are skipped.")
	connectTimeout := flag.Duration("fence.connect-timeout", fencesanity.DefaultConnectTimeout, "How long each endpoint has to answer a Probe before the run starts; one that does not fails the run at once (csi-test itself would wait a minute in every spec)")
	flag.BoolVar(&fc.CheckUnpublishRevokesAccess, "fence.check-unpublish-revokes-access", false, "Check the declaration that a plain ControllerUnpublishVolume revokes the node's access (CSIDriver annotation csi-fence.io/unpublish-revokes-access): stage and publish a filesystem volume on this host, write through the published path, unpublish it without fence, then a write and a read through the old path must fail, and the data must be there once it is published again. The node service must run on this host; run it as root (it writes through the driver's mounts and unmounts stale ones). Each write and read is bounded by --fence.io-check-timeout")
	flag.DurationVar(&fc.FenceTimeout, "fence.timeout", fencesanity.DefaultFenceTimeout, "How long to retry a fence the driver refuses for now (FAILED_PRECONDITION, UNAVAILABLE), and the cleanup's DeleteVolume likewise (a driver may see a volume in use for a while after the I/O checks)")
	flag.Parse()

	fc.IOTimeout = *ioTimeout
	if *showVersion {
		fmt.Println("csi-fence-sanity", version.String())
		return 0
	}
	if config.Address == "" {
		fmt.Fprintln(os.Stderr, "csi-fence-sanity: --csi.endpoint must be provided with a CSI endpoint")
		return 2
	}
	if at := strings.TrimSpace(strings.ToLower(config.TestVolumeAccessType)); at != "mount" && at != "block" {
		fmt.Fprintln(os.Stderr, "csi-fence-sanity: --csi.testvolumeaccesstype valid values are mount or block")
		return 2
	}
	if err := fencesanity.CheckEndpoints(context.Background(), config, fc, *connectTimeout); err != nil {
		fmt.Fprintln(os.Stderr, "csi-fence-sanity:", err)
		return 1
	}
	// A driver without the extension passes with every fence spec
	// skipped: say so in one line, after the run, where it is seen (the
	// skipped specs say it only with --ginkgo.v, once each).
	noFence, err := fencesanity.FenceSpecsApply(context.Background(), config, *connectTimeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "csi-fence-sanity:", err)
		return 1
	}
	if noFence != "" {
		defer fmt.Fprintln(os.Stderr, "csi-fence-sanity: "+fencesanity.NoFenceSpecRan+noFence)
	}
	// Without an I/O check a broken fence passes: say so before the run and
	// again after it, where it is seen (the skipped spec says it too).
	warnIO := func() {}
	if *ioCmd != "" {
		fc.IOChecker = fencesanity.CommandIOChecker(*ioCmd, *ioTimeout)
	} else {
		warnIO = func() { fmt.Fprintln(os.Stderr, "csi-fence-sanity: WARNING: "+fencesanity.NoIOCheckMessage) }
	}
	warnIO()
	defer warnIO()
	klog.SetOutput(ginkgo.GinkgoWriter)
	var r result
	fencesanity.Test(&r, config, fc)
	if r.failed {
		return 1
	}
	return 0
}
