{{/* Names, labels and the agents' merged settings. */}}

{{- define "accel.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "accel.labels" -}}
app.kubernetes.io/part-of: accel
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "accel.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* An agent's settings: agentDefaults with the agent's own keys merged over them, plus what
the chart derives from its config: the modes it serves (vgpu, dra, mps, draShared) and the
sharings its DRA GPUs publish. Call with (dict "root" $ "name" NAME "agent" VALUES); returns
YAML (fromYaml it). */}}
{{- define "accel.agent" -}}
{{- $a := mustMergeOverwrite (deepCopy .root.Values.agentDefaults) (deepCopy (omit .agent "enabled")) -}}
{{- $c := $a.config -}}
{{- $mode := default "pgpu" $c.mode -}}
{{- $gpuModes := toString (default "" $c.gpuModes) -}}
{{- if not (has $mode (list "pgpu" "vgpu" "dra" "vfio")) -}}
{{- fail (printf "agents.%s.config.mode: %q is not pgpu, vgpu, dra or vfio" .name $mode) -}}
{{- end -}}
{{- $vgpu := or (eq $mode "vgpu") (regexMatch "=vgpu(,|$)" $gpuModes) -}}
{{- $dra := or (eq $mode "dra") (regexMatch "=dra(,|$)" $gpuModes) -}}
{{- $draCfg := default dict $c.dra -}}
{{- $draSharing := default "exclusive" $draCfg.sharing -}}
{{- $draGpuSharing := toString (default "" $draCfg.gpuSharing) -}}
{{- $published := list -}}
{{- if $dra -}}
{{- $published = append $published (get (dict "exclusive" "exclusive" "shared" "vgpu" "mps" "mps") $draSharing) -}}
{{- range $e := splitList "," $draGpuSharing -}}
{{- if contains "=" $e -}}
{{- $published = append $published (get (dict "exclusive" "exclusive" "shared" "vgpu" "mps" "mps") (last (splitList "=" $e))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $dra $draCfg.mig -}}
{{- /* dra.mig: its GPUs in MIG mode are published as MIG partitions (docs/mig.md) */ -}}
{{- $published = append $published "mig" -}}
{{- end -}}
{{- $published = uniq $published -}}
{{- $sharing := default dict $c.sharing -}}
{{- $mps := or (hasKey $sharing "mps") (has "mps" $published) -}}
{{- $_ := set $a "name" .name -}}
{{- $_ := set $a "modes" (dict "vgpu" $vgpu "dra" $dra "mps" $mps "draShared" (has "vgpu" $published) "devicePlugin" (or (ne $mode "dra") (regexMatch "=(pgpu|vgpu|vfio)(,|$)" $gpuModes))) -}}
{{- $_ := set $a "published" $published -}}
{{- toYaml $a -}}
{{- end -}}

{{/* The enabled agents, as a list of accel.agent results. */}}
{{- define "accel.agents" -}}
{{- $out := list -}}
{{- range $name, $agent := .Values.agents -}}
{{- if and $agent (ne (toString (dig "enabled" true $agent)) "false") -}}
{{- $out = append $out (include "accel.agent" (dict "root" $ "name" $name "agent" $agent) | fromYaml) -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "agents" $out) -}}
{{- end -}}

{{/* The pod-level scheduling of a component: the chart's nodeSelector and tolerations plus
its own. Call with (dict "root" $ "own" SETTINGS). */}}
{{- define "accel.scheduling" -}}
{{- $sel := mustMergeOverwrite (deepCopy .root.Values.nodeSelector) (deepCopy (default dict .own.nodeSelector)) -}}
{{- with $sel }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $tol := concat .root.Values.tolerations (default list .own.tolerations) -}}
{{- with $tol }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
