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
