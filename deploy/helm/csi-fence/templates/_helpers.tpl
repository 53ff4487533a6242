{{/*
Named templates of the csi-fence chart. Those under "Containers" are its
interface to a driver's chart: each takes the csi-fence chart's own context,
which a parent chart reaches as (index .Subcharts "csi-fence"), so that they
read csi-fence's values and appVersion whether the chart is installed alone
or as a dependency.
*/}}

{{/* An object name with values.namePrefix: include "csi-fence.name" (list $ "base-name") */}}
{{- define "csi-fence.name" -}}
{{- printf "%s%s" (index . 0).Values.namePrefix (index . 1) -}}
{{- end -}}

{{- define "csi-fence.labels" -}}
app.kubernetes.io/part-of: csi-fence
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Where the driver's pods, hence its ServiceAccounts, run. */}}
{{- define "csi-fence.driverNamespace" -}}
{{- .Values.driver.namespace | default .Release.Namespace -}}
{{- end -}}

{{- define "csi-fence.controllerServiceAccount" -}}
{{- if .Values.controller.serviceAccount.create -}}
{{- include "csi-fence.name" (list . .Values.controller.serviceAccount.name) -}}
{{- else -}}
{{- required "controller.serviceAccount.name: the driver's controller ServiceAccount" .Values.controller.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "csi-fence.nodeServiceAccount" -}}
{{- if .Values.nodeAgent.serviceAccount.create -}}
{{- include "csi-fence.name" (list . .Values.nodeAgent.serviceAccount.name) -}}
{{- else -}}
{{- required "nodeAgent.serviceAccount.name: the driver's node ServiceAccount" .Values.nodeAgent.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* An image reference: include "csi-fence.image" (list $ .Values.image.x "suffix") */}}
{{- define "csi-fence.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- printf "%s:%s%s" $img.repository ($img.tag | default $root.Chart.AppVersion) (index . 2) -}}
{{- end -}}

{{- define "csi-fence.pullPolicy" -}}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end -}}
{{- end -}}

{{/* Fails the render on values that cannot work together (values.schema.json checks each alone). */}}
{{- define "csi-fence.validate" -}}
{{- if and .Values.features.powerFencing (not .Values.features.failover) -}}
{{- fail "features.powerFencing needs features.failover: power fencing is one of the failover's backends" -}}
{{- end -}}
{{- if and .Values.features.machineFencing (not .Values.features.failover) -}}
{{- fail "features.machineFencing needs features.failover: machine fencing is one of the failover's backends" -}}
{{- end -}}
{{- if and .Values.features.machineFencing (not (has "machine" (.Values.controller.fencingBackends | default list))) -}}
{{- fail "features.machineFencing needs controller.fencingBackends to name machine (e.g. [storage, power, out-of-service, machine]): the backend is not on by default" -}}
{{- end -}}
{{- end -}}

{{/*
Containers
*/}}

{{/*
csi-fence-attacher in the controller role: the container that replaces
external-attacher's (same name by default) in the driver's controller pod,
whose pod must have the volume controller.socketVolume (shared with the
driver) and run as the controller ServiceAccount.
*/}}
{{- define "csi-fence.controller.container" -}}
{{- include "csi-fence.validate" . -}}
{{- $c := .Values.controller -}}
{{- $gates := deepCopy $c.featureGates -}}
{{- if .Values.features.failover -}}
{{- $_ := set $gates "NonGracefulFailover" true -}}
{{- end -}}
name: {{ $c.containerName }}
image: {{ include "csi-fence.image" (list . .Values.image.attacher (ternary "-power-fencing" "" .Values.features.powerFencing)) }}
{{- include "csi-fence.pullPolicy" . }}
args:
- --v={{ $c.logLevel }}
- --csi-address={{ $c.csiAddress }}
{{- if $c.leaderElection }}
- --leader-election
{{- with $c.leaderElectionTimings }}
{{- with .leaseDuration }}
- --leader-election-lease-duration={{ . }}
{{- end }}
{{- with .renewDeadline }}
- --leader-election-renew-deadline={{ . }}
{{- end }}
{{- with .retryPeriod }}
- --leader-election-retry-period={{ . }}
{{- end }}
{{- with .namespace }}
- --leader-election-namespace={{ . }}
{{- end }}
{{- end }}
{{- end }}
{{- if $c.httpPort }}
- --http-endpoint=:{{ $c.httpPort }}
{{- end }}
{{- if $gates }}
- --feature-gates={{ range $i, $k := keys $gates | sortAlpha }}{{ if $i }},{{ end }}{{ $k }}={{ index $gates $k }}{{ end }}
{{- end }}
{{- /* Always named: the Role for these Leases is rendered in it. */}}
- --storm-guard-namespace={{ $c.stormGuardNamespace }}
{{- with $c.fencingBackends }}
- --fencing-backends={{ join "," . }}
{{- end }}
{{- if not (kindIs "invalid" $c.maxFencedNodes) }}
- --max-fenced-nodes={{ $c.maxFencedNodes }}
{{- end }}
{{- if not (kindIs "invalid" $c.maxFencedNodePercent) }}
- --max-fenced-node-percent={{ $c.maxFencedNodePercent }}
{{- end }}
{{- if $c.failoverOptIn }}
- --failover-opt-in
{{- end }}
{{- if $c.fencingTaints }}
- --fencing-taints
{{- end }}
{{- with $c.fencingRequiredAfter }}
- --fencing-required-after={{ . }}
{{- end }}
{{- with $c.fenceAgents }}
- --fence-agents={{ join "," . }}
{{- end }}
{{- range $c.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- if $c.httpPort }}
ports:
- name: http-endpoint
  containerPort: {{ $c.httpPort }}
livenessProbe:
  httpGet: {path: /healthz/leader-election, port: http-endpoint}
  periodSeconds: 20
  timeoutSeconds: 10
  failureThreshold: 1
readinessProbe:
  httpGet: {path: /readyz, port: http-endpoint}
  periodSeconds: 10
{{- end }}
{{- with $c.env }}
env:
{{- toYaml . | nindent 0 }}
{{- end }}
{{- with $c.securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumeMounts:
- name: {{ $c.socketVolume }}
  mountPath: {{ dir $c.csiAddress }}
{{- with $c.resources }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
csi-fence-attacher in the node role, for the driver's node DaemonSet: its
pod must have the volume nodeAgent.socketVolume (shared with the node
plugin), the kubelet directory ("csi-fence.nodeAgent.volumes"), the labels
"csi-fence.nodeAgent.podLabels" and run as the node ServiceAccount with its
own projected token (the admission policy reads the node from it).
*/}}
{{- define "csi-fence.nodeAgent.container" -}}
{{- $n := .Values.nodeAgent -}}
name: {{ $n.containerName }}
image: {{ include "csi-fence.image" (list . .Values.image.attacher "") }}
{{- include "csi-fence.pullPolicy" . }}
args:
- --v={{ $n.logLevel }}
- --role=node
- --csi-address={{ $n.csiAddress }}
- --kubelet-dir={{ $n.kubeletDir }}
- --http-endpoint=:{{ $n.httpPort }}
{{- range $n.extraArgs }}
- {{ . | quote }}
{{- end }}
ports:
# Metrics, and the termination reason of pods force-deleted from this node
# while it was away (/termination-reason).
- name: fence-http
  containerPort: {{ $n.httpPort }}
env:
- name: NODE_NAME
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
{{- with $n.env }}
{{- toYaml . | nindent 0 }}
{{- end }}
securityContext:
  {{- toYaml (merge (deepCopy $n.securityContext) (dict "runAsUser" 0)) | nindent 2 }}
volumeMounts:
- name: {{ $n.socketVolume }}
  mountPath: {{ dir $n.csiAddress }}
- name: {{ $n.kubeletDirVolume }}
  mountPath: {{ $n.kubeletDir }}
  mountPropagation: HostToContainer
{{- with $n.resources }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The node agent's volume: the kubelet directory. */}}
{{- define "csi-fence.nodeAgent.volumes" -}}
- name: {{ .Values.nodeAgent.kubeletDirVolume }}
  hostPath: {path: {{ .Values.nodeAgent.kubeletDir }}, type: Directory}
{{- end -}}

{{/* The pods' imagePullSecrets (values.imagePullSecrets), for a pod spec. */}}
{{- define "csi-fence.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 0 }}
{{- end -}}
{{- end -}}

{{/* Labels of the node DaemonSet's pods: the node agents' Service selects them. */}}
{{- define "csi-fence.nodeAgent.podLabels" -}}
csi-fence.io/node-agent: "true"
{{- end -}}

{{/*
The tolerations the node agent's pod needs, for the driver's node DaemonSet
to include beside its own: the agent cleans a node under fencing up when it
comes back, and the node is released only then. The out-of-service taint
would evict it for good, the quarantine taint keep it off. `kubectl fence
check-manifests` fails a build without them.
*/}}
{{- define "csi-fence.nodeAgent.tolerations" -}}
- {key: csi-fence.io/quarantine, operator: Exists}
- {key: node.kubernetes.io/out-of-service, operator: Exists}
{{- end -}}
