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

package kubeletlayout

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// VolumeData is the content of a vol_data.json file. The kubelet writes a
// JSON object of strings with these keys (pkg/volume/csi volDataKey); the
// staging file has only volumeHandle, driverName and, with SELinux mounts,
// seLinuxMountContext.
type VolumeData struct {
	SpecVolID           string `json:"specVolID,omitempty"`
	VolumeHandle        string `json:"volumeHandle"`
	DriverName          string `json:"driverName"`
	NodeName            string `json:"nodeName,omitempty"`
	AttachmentID        string `json:"attachmentID,omitempty"`
	VolumeLifecycleMode string `json:"volumeLifecycleMode,omitempty"`
	SELinuxMountContext string `json:"seLinuxMountContext,omitempty"`
}

// Lifecycle modes the kubelet records in volumeLifecycleMode.
const (
	LifecyclePersistent = "Persistent"
	LifecycleEphemeral  = "Ephemeral"
)

// ReadVolumeData reads dir/vol_data.json. A missing file is reported with an
// error that satisfies errors.Is(err, os.ErrNotExist). A file without a
// volume handle or driver name is malformed: the kubelet never writes one.
func ReadVolumeData(dir string) (*VolumeData, error) {
	path := filepath.Join(dir, VolDataFileName)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d := &VolumeData{}
	if err := json.Unmarshal(b, d); err != nil {
		return nil, fmt.Errorf("malformed %s: %w", path, err)
	}
	if d.VolumeHandle == "" || d.DriverName == "" {
		return nil, fmt.Errorf("malformed %s: no volumeHandle or driverName", path)
	}
	return d, nil
}

// WriteVolumeData writes dir/vol_data.json, creating dir if needed, as the
// kubelet does before it calls NodeStageVolume or NodePublishVolume.
func WriteVolumeData(dir string, d VolumeData) error {
	if d.VolumeHandle == "" || d.DriverName == "" {
		return errors.New("vol_data.json needs a volumeHandle and a driverName")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, VolDataFileName), append(b, '\n'), 0o640)
}
