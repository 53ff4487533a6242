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

// Package fence carries the fence/force extension of CSI (DESIGN.md section 4,
// after CSI spec PR #477) on the stock spec types.
//
// The released spec has no such fields, so they travel as protobuf unknown
// fields with the numbers PR #477 chose (fence = 4 on
// ControllerUnpublishVolumeRequest, force = 3 on NodeUnpublishVolumeRequest and
// NodeUnstageVolumeRequest). A driver built on the stock Go bindings that knows
// nothing of the extension decodes such a request without error and simply
// ignores the field; that is why the CO must only set it when the driver
// advertises the matching capability (UNPUBLISH_FENCE / FORCE_UNPUBLISH, both
// the private enum value 1000, since PR #477's own numbers have been taken by
// released capabilities).
package fence
