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

package imagebuild

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseDepends(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want [][]string
	}{
		{"", nil},
		{"libc6 (>= 2.34)", [][]string{{"libc6"}}},
		{"python3:any, libc6 (>= 2.15), libcurl3-gnutls (>= 7.88.1)", [][]string{{"python3"}, {"libc6"}, {"libcurl3-gnutls"}}},
		{"media-types | mime-support", [][]string{{"media-types", "mime-support"}}},
		{"debconf (>= 0.5) | debconf-2.0, libfoo [amd64]", [][]string{{"debconf", "debconf-2.0"}, {"libfoo"}}},
		{"python3 (<< 3.12),python3 (>= 3.11~)", [][]string{{"python3"}, {"python3"}}},
	} {
		if got := parseDepends(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseDepends(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A dpkg database of a few packages: an agent with an unwanted dependency,
// a library with alternatives and a virtual package, one not installed.
const testStatus = `Package: agent
Status: install ok installed
Architecture: all
Version: 1.0
Depends: python3:any, cloud-sdk

Package: python3
Status: install ok installed
Architecture: amd64
Version: 3.11
Pre-Depends: dpkg (>= 1.13)
Depends: libc6 (>= 2.34),
 mime-support | media-types

Package: media-types
Status: install ok installed
Architecture: all
Version: 10

Package: libc6
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Version: 2.36
Depends: libgcc-s1

Package: gcc-base
Status: install ok installed
Architecture: amd64
Version: 12
Provides: libgcc-s1 (= 12)

Package: dpkg
Status: install ok installed
Architecture: amd64
Version: 1.21

Package: cloud-sdk
Status: deinstall ok config-files
Architecture: all
Version: 9

Package: tool
Status: install ok installed
Architecture: amd64
Version: 2
Depends: missing-lib | other-missing
`

func TestDpkgClosure(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte(testStatus), 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := readDpkgStatus(filepath.Join(dir, "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		pkgs    []string
		skip    []string
		want    []string
		wantErr string
	}{
		{name: "dependencies, alternatives and a virtual package", pkgs: []string{"python3"}, skip: []string{"dpkg"},
			want: []string{"python3", "libc6", "media-types", "gcc-base"}},
		{name: "a skipped package is not followed", pkgs: []string{"python3"}, skip: []string{"dpkg", "libc6"},
			want: []string{"python3", "media-types"}},
		{name: "a dependency not installed (config files only)", pkgs: []string{"agent"},
			wantErr: "package agent depends on cloud-sdk, none of which is installed"},
		{name: "no alternative installed", pkgs: []string{"tool"},
			wantErr: "package tool depends on missing-lib | other-missing, none of which is installed"},
		{name: "a package not installed", pkgs: []string{"nothing"}, wantErr: "package nothing is not installed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := db.closure(tc.pkgs, tc.skip)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range got {
				names = append(names, p.name)
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("closure %q, want %q", names, tc.want)
			}
		})
	}
}

// TestDebianFiles builds the files of a fake root with bookworm's merged
// /usr: a library listed at /lib/... is in the image at usr/lib/... behind
// the link lib -> usr/lib, a program's link comes with its target, what a
// package lists and the host no longer has is left out, documentation is
// excluded, and Paths bring a directory with its contents.
func TestDebianFiles(t *testing.T) {
	root := t.TempDir()
	write := func(p, data string, mode os.FileMode) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	link := func(p, target string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	write("usr/lib/x86_64-linux-gnu/libc.so.6", "libc", 0o755)
	write("usr/bin/python3.11", "python", 0o755)
	write("usr/share/doc/libc6/copyright", "doc", 0o644)
	write("usr/share/agent/lib.py", "lib", 0o644)
	write("usr/share/agent/sub/more.py", "more", 0o644)
	write("usr/sbin/unrelated", "no", 0o755)
	link("lib", "usr/lib")
	link("usr/bin/python3", "python3.11")
	write("var/lib/dpkg/status", `Package: libc6
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Version: 2.36

Package: python3
Status: install ok installed
Architecture: amd64
Version: 3.11
Depends: libc6
`, 0o644)
	write("var/lib/dpkg/info/libc6:amd64.list", "/.\n/lib\n/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu/libc.so.6\n/lib/x86_64-linux-gnu/removed.so\n/usr/share/doc/libc6/copyright\n", 0o644)
	write("var/lib/dpkg/info/python3.list", "/.\n/usr\n/usr/bin\n/usr/bin/python3\n", 0o644)

	got, err := DebianFiles(DebianOptions{Root: root, Packages: []string{"python3"}, Paths: []string{"/usr/share/agent"}, Exclude: []string{"/usr/share/doc"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"libc6=2.36", "python3=3.11"}; !slices.Equal(got.Packages, want) {
		t.Errorf("packages %q, want %q", got.Packages, want)
	}
	var entries []string
	for _, f := range got.Files {
		e := f.Name
		switch {
		case f.Dir:
			e += "/"
		case f.Link != "":
			e += " -> " + f.Link
		default:
			e += " " + string(f.Data)
		}
		entries = append(entries, e)
	}
	want := []string{
		"lib -> usr/lib",
		"usr/",
		"usr/bin/",
		"usr/bin/python3 -> python3.11",
		"usr/bin/python3.11 python",
		"usr/lib/",
		"usr/lib/x86_64-linux-gnu/",
		"usr/lib/x86_64-linux-gnu/libc.so.6 libc",
		"usr/share/",
		"usr/share/agent/",
		"usr/share/agent/lib.py lib",
		"usr/share/agent/sub/",
		"usr/share/agent/sub/more.py more",
	}
	if !slices.Equal(entries, want) {
		t.Errorf("entries:\n%s\nwant:\n%s", strings.Join(entries, "\n"), strings.Join(want, "\n"))
	}
	// They make a layer.
	if _, err := Layer(got.Files, Epoch); err != nil {
		t.Fatal(err)
	}
}
