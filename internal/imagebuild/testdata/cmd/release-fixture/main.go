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

// Command release-fixture is what TestRelease builds an image of: the
// smallest command that says the version Release stamps into pkg/version.
// Cross-compiling the product's commands for arm64 would compile their whole
// dependency tree (client-go, gRPC, ...) a second time for one unit test;
// `make images` does that for a release.
package main

import (
	"flag"
	"fmt"

	"github.com/csi-fence/fence-attacher/pkg/version"
)

func main() {
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Version())
	}
}
