{{/* Names, labels and small lookups shared by the templates. */}}

{{- define "drasat.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "drasat.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "drasat.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "drasat.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: include with (list $ "controller"). */}}
{{- define "drasat.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "drasat.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "drasat.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "drasat.controller.serviceAccountName" -}}
{{- default (printf "%s-controller" (include "drasat.fullname" .)) .Values.controller.serviceAccount.name }}
{{- end }}

{{- define "drasat.nodePlugin.serviceAccountName" -}}
{{- default (printf "%s-node-plugin" (include "drasat.fullname" .)) .Values.nodePlugin.serviceAccount.name }}
{{- end }}

{{- define "drasat.policyConfigMap" -}}
{{- default (printf "%s-policy" (include "drasat.fullname" .)) .Values.policy.existingConfigMap }}
{{- end }}

{{/*
The DRA mode installed: "v1" (current DRA, resource.k8s.io/v1: DeviceClasses, ResourceSlices; the
controller writes claims' status.allocation) or "classic" (a control-plane controller negotiating
through PodSchedulingContexts). `draApi: auto` picks it from the server's version: classic up to
1.31 (1.32 removed it), v1 from 1.34 (where resource.k8s.io/v1 is GA). 1.32 and 1.33 have neither
in a form drasat speaks: "none", which validate.yaml turns into an explanation.
*/}}
{{- define "drasat.draApi" -}}
{{- if ne .Values.draApi "auto" }}
{{- .Values.draApi }}
{{- else if semverCompare ">=1.34.0-0" .Capabilities.KubeVersion.Version }}
{{- "v1" }}
{{- else if semverCompare "<1.32.0-0" .Capabilities.KubeVersion.Version }}
{{- "classic" }}
{{- else }}
{{- "none" }}
{{- end }}
{{- end }}

{{/* "true" when drasat's controller runs: classic mode, or v1 mode with allocator=drasat. */}}
{{- define "drasat.controller.enabled" -}}
{{- or (eq (include "drasat.draApi" .) "classic") (eq .Values.allocator "drasat") }}
{{- end }}

{{/*
"true" when drasat's own driver (gpu.drasat.io) runs: classic mode, or v1 mode with gpu.drasat.io
among controller.drivers (or allocator=kube-scheduler, where drasat only prepares). Without it
(drasat as the allocator for NVIDIA's driver) the chart installs the controller only: no node
plugin, none of drasat's classes, no nvidia.com/gpu conversion into drasat's class.
*/}}
{{- define "drasat.ownDriver" -}}
{{- or (eq (include "drasat.draApi" .) "classic") (ne .Values.allocator "drasat") (has "gpu.drasat.io" .Values.controller.drivers) }}
{{- end }}

{{/* The kubelet API the node plugin registers: classic in classic mode, structured in v1 mode. */}}
{{- define "drasat.kubeletApi" -}}
{{- if ne .Values.nodePlugin.kubeletApi "auto" }}
{{- .Values.nodePlugin.kubeletApi }}
{{- else if eq (include "drasat.draApi" .) "v1" }}
{{- "structured" }}
{{- else }}
{{- "classic" }}
{{- end }}
{{- end }}

{{/* The resource.k8s.io version of the class: v1alpha2 (ResourceClass) or v1alpha3 (DeviceClass). */}}
{{- define "drasat.resourceApiVersion" -}}
{{- if ne .Values.resourceClass.apiVersion "auto" }}
{{- .Values.resourceClass.apiVersion }}
{{- else if semverCompare ">=1.31.0-0" .Capabilities.KubeVersion.Version }}
{{- "resource.k8s.io/v1alpha3" }}
{{- else }}
{{- "resource.k8s.io/v1alpha2" }}
{{- end }}
{{- end }}

{{/*
"true" when the security ValidatingAdmissionPolicies are created. auto: where the cluster serves
admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy; where helm cannot tell (`helm
template` without kinds in --api-versions), assumed from 1.30 on, where it is GA and served by
default (the NOTES say so): a GitOps render keeps its security controls.
*/}}
{{- define "drasat.nodeAdmissionPolicy.enabled" -}}
{{- $setting := .Values.nodeAdmissionPolicy.enabled }}
{{- if ne (toString $setting) "auto" }}
{{- $setting }}
{{- else if eq (include "drasat.discoveryKnowsKinds" .) "true" }}
{{- .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy" }}
{{- else }}
{{- semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version }}
{{- end }}
{{- end }}

{{/* Host paths of the kubelet's plugins dir and of this driver's socket dir in it. */}}
{{- define "drasat.pluginsDir" -}}
{{- printf "%s/plugins" (trimSuffix "/" .Values.nodePlugin.kubeletDir) }}
{{- end }}

{{- define "drasat.pluginDir" -}}
{{- printf "%s/plugins/gpu.drasat.io" (trimSuffix "/" .Values.nodePlugin.kubeletDir) }}
{{- end }}

{{- define "drasat.registryDir" -}}
{{- printf "%s/plugins_registry" (trimSuffix "/" .Values.nodePlugin.kubeletDir) }}
{{- end }}

{{/*
Who puts drasat's scheduling gate on pods (templates/admission.yaml): "policy" (a
MutatingAdmissionPolicy), "webhook" (the controller's), or "off". Only with drasat's controller in
v1 mode. auto: the policy where the server serves MutatingAdmissionPolicy (v1 from 1.36, v1beta1
where turned on), else the webhook (always available).
*/}}
{{- define "drasat.admission" -}}
{{- $mode := .Values.controller.admission.mode }}
{{- if not (and (eq (include "drasat.draApi" .) "v1") (eq (include "drasat.controller.enabled" .) "true")) }}
{{- "off" }}
{{- else if ne $mode "auto" }}
{{- $mode }}
{{- else if include "drasat.admissionPolicyApi" . }}
{{- "policy" }}
{{- else }}
{{- "webhook" }}
{{- end }}
{{- end }}

{{/* The MutatingAdmissionPolicy version the server serves ("" when none is listed). */}}
{{- define "drasat.admissionPolicyApi" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" }}
{{- "admissionregistration.k8s.io/v1" }}
{{- else if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy" }}
{{- "admissionregistration.k8s.io/v1beta1" }}
{{- end }}
{{- end }}

{{/*
The MutatingAdmissionPolicy version to render where the values ask for one (admission.mode=policy,
extendedResources.enabled=true): the one served; where helm cannot tell (no kinds), v1 from 1.36
on, where it is GA and served by default; "" where neither (validate.yaml explains).
*/}}
{{- define "drasat.admissionPolicyApi.rendered" -}}
{{- $served := include "drasat.admissionPolicyApi" . }}
{{- if $served }}
{{- $served }}
{{- else if and (ne (include "drasat.discoveryKnowsKinds" .) "true") (semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version) }}
{{- "admissionregistration.k8s.io/v1" }}
{{- end }}
{{- end }}

{{/* "true" when helm's capabilities list kinds (a real `helm install/upgrade`, or
`--api-versions` naming kinds): only then can the chart tell what the cluster does not serve. */}}
{{- define "drasat.discoveryKnowsKinds" -}}
{{- .Capabilities.APIVersions.Has "resource.k8s.io/v1/DeviceClass" }}
{{- end }}

{{/* "true" when the cluster serves DeviceTaintRule in a version the controller speaks. */}}
{{- define "drasat.taintRuleServed" -}}
{{- $c := .Capabilities.APIVersions }}
{{- or ($c.Has "resource.k8s.io/v1/DeviceTaintRule") ($c.Has "resource.k8s.io/v1beta2/DeviceTaintRule") ($c.Has "resource.k8s.io/v1alpha3/DeviceTaintRule") }}
{{- end }}

{{/*
"true" when the controller keeps the DeviceTaintRule (v1 mode). auto: where the cluster serves it,
or where helm cannot tell (no kinds in its capabilities; the controller then logs if the server
does not serve it).
*/}}
{{- define "drasat.deviceTaint" -}}
{{- $setting := .Values.controller.deviceTaint }}
{{- if ne (toString $setting) "auto" }}
{{- $setting }}
{{- else if ne (include "drasat.discoveryKnowsKinds" .) "true" }}
{{- "true" }}
{{- else }}
{{- include "drasat.taintRuleServed" . }}
{{- end }}
{{- end }}

{{/* The Secret holding the webhook's serving certificate (tls.crt, tls.key). */}}
{{- define "drasat.webhookSecret" -}}
{{- default (printf "%s-webhook-tls" (include "drasat.fullname" .)) .Values.controller.admission.webhook.tls.secretName }}
{{- end }}

{{/*
"true" when the controller's webhook converts nvidia.com/gpu into claims (`drasat controller
--webhook-extended-resources`): the webhook is the admission and extendedResources.enabled is not
false, but no MutatingAdmissionPolicy converts it (templates/extended-resources.yaml: where none
is served).
*/}}
{{- define "drasat.extendedResources.byWebhook" -}}
{{- and (eq (include "drasat.admission" .) "webhook") (ne (toString .Values.extendedResources.enabled) "false") (ne (include "drasat.extendedResources.enabled" .) "true") }}
{{- end }}
