"""The classic what-if (resource.k8s.io/v1alpha2 manifests and NodeAllocationStates).

What only a classic what-if run needs: compiling classic manifests into the solver's pods
(`manifests`), running and reporting it (`run`, `report`), its table (`table`) and its YAML/JSON
listing of v1alpha2 claims (`objects`). The inputs, the cluster model, the pod helpers and the
one output (GPU bars, summary, page) are the product's `drasat.whatif`; `drasat whatif` hands a
run here when its manifests are classic.
"""
