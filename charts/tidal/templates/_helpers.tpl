{{/*
The release's full name: the release name when it already says tidal (helm install tidal), else
<release>-tidal. Every object of the release is named after it.
*/}}
{{- define "tidal.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tidal.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "tidal.labels" -}}
{{ include "tidal.selectorLabels" . }}
app.kubernetes.io/part-of: tidal
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "tidal.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "tidal.fullname" .) -}}
{{- end -}}

{{/* The cloud tidal launches on: config.cloud, else tidal's default. */}}
{{- define "tidal.cloud" -}}
{{- dig "cloud" "aws" .Values.config -}}
{{- end -}}

{{/*
The configuration the daemon reads, as YAML: config with the Lease (and so the tidal-status ConfigMap) in
the release namespace unless config names another, where the Role is then made instead.
*/}}
{{- define "tidal.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $election := get $config "leaderElection" | default dict -}}
{{- $_ := set $election "namespace" (get $election "namespace" | default .Release.Namespace) -}}
{{- $_ := set $config "leaderElection" $election -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The namespace of the Lease and the tidal-status ConfigMap. */}}
{{- define "tidal.leaseNamespace" -}}
{{- dig "leaderElection" "namespace" .Release.Namespace .Values.config -}}
{{- end -}}

{{/* The port the daemon serves /metrics, /healthz and /readyz on: the port of config.metricsAddress. */}}
{{- define "tidal.metricsPort" -}}
{{- $address := dig "metricsAddress" ":8080" .Values.config | toString -}}
{{- $port := splitList ":" $address | last -}}
{{- if not (regexMatch "^[0-9]+$" $port) -}}
{{- fail (printf "config.metricsAddress: %q has no port (host:port, e.g. \":8080\")" $address) -}}
{{- end -}}
{{- $port -}}
{{- end -}}

{{/*
The image: image.repository is required; the tag defaults to <appVersion>-<cloud>, the tag of the image built
with only that cloud's SDK (docs/install.md).
*/}}
{{- define "tidal.image" -}}
{{- $repository := required "image.repository is required: the repository you pushed the tidal image to (docs/install.md builds it), e.g. --set image.repository=registry.example.com/tidal-autoscaler" .Values.image.repository -}}
{{- $cloud := include "tidal.cloud" . -}}
{{- $tag := .Values.image.tag -}}
{{- if not $tag -}}
{{- if not (has $cloud (list "aws" "gcp" "azure" "simulated")) -}}
{{- fail (printf "image.tag is required for config.cloud %q: there is no built-in image for that cloud" $cloud) -}}
{{- end -}}
{{- $tag = printf "%s-%s" .Chart.AppVersion $cloud -}}
{{- end -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}

{{/*
Checks across values that the schema cannot express; each failure is one line naming the values.
*/}}
{{- define "tidal.validate" -}}
{{- $cloud := include "tidal.cloud" . -}}
{{- $replicas := int .Values.replicaCount -}}
{{- if and (gt $replicas 1) (not (dig "leaderElection" "enabled" true .Values.config)) -}}
{{- fail (printf "replicaCount: %d replicas need config.leaderElection.enabled true, or only one may act" $replicas) -}}
{{- end -}}
{{- if and (eq $cloud "simulated") (gt $replicas 1) -}}
{{- fail (printf "replicaCount: %d with config.cloud simulated: the simulated cloud lives in the leader's memory, so a second replica would see another cloud; set replicaCount=1" $replicas) -}}
{{- end -}}
{{- if and .Values.priorityClass.create (hasPrefix "system-" .Values.priorityClass.name) -}}
{{- fail (printf "priorityClass.name: %q with priorityClass.create: the system- classes are Kubernetes' own; name a class of your own" .Values.priorityClass.name) -}}
{{- end -}}
{{- range $name, $key := dict "aws" "roleArn" "gcp" "serviceAccount" "azure" "clientId" -}}
{{- if and (ne $name $cloud) (get (get $.Values.identity $name) $key) -}}
{{- fail (printf "identity.%s.%s is set but config.cloud is %q: set only the identity of the cloud tidal launches on" $name $key $cloud) -}}
{{- end -}}
{{- end -}}
{{- end -}}
