//! Expected messages were checked against maporacle (k8s.io/apiserver
//! v0.36.2, Go 1.26) with JSONPatch policies writing these values.

use super::*;
use serde_json::json;

const CONFIG_MAP: &str = "io.k8s.api.core.v1.ConfigMap";
const POD: &str = "io.k8s.api.core.v1.Pod";

fn message(object: Value, ty: &str) -> Option<String> {
    go_decode_error(&object, Some(ty)).map(|e| e.to_string())
}

/// The decoder meets keys in sorted order, as upstream's decoder meets them
/// in the re-encoded Go map: serde_json's map (without `preserve_order`)
/// iterates that way.
#[test]
fn keys_iterate_sorted() {
    let object: Value =
        serde_json::from_str(r#"{"b": 1, "a": 2, "B": 3, "aa": 4}"#).unwrap_or_default();
    let keys: Vec<&str> = object
        .as_object()
        .into_iter()
        .flat_map(|m| m.keys())
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["B", "a", "aa", "b"]);
}

#[test]
fn table_parses() {
    let table = parse_table(include_str!("go_types.json")).expect("go_types.json");
    assert!(table.def(POD).is_some());
}

#[test]
fn a_typed_object_decodes() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"},
        "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}],
            "resources": {"limits": {"cpu": "500m", "memory": 1024}}}],
            "terminationGracePeriodSeconds": 30, "activeDeadlineSeconds": null, "bogus": 1}});
    assert_eq!(message(pod, POD), None);
}

#[test]
fn wrong_types_name_struct_path_and_go_type() {
    let cases = [
        (json!({"data": {"a": 1}}), "json: cannot unmarshal number into Go struct field ConfigMap.data of type string"),
        (json!({"data": "x"}), "json: cannot unmarshal string into Go struct field ConfigMap.data of type map[string]string"),
        (json!({"metadata": {"labels": {"a": true}}}), "json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.labels of type string"),
        (json!({"metadata": {"generation": 1.5}}), "json: cannot unmarshal number 1.5 into Go struct field ObjectMeta.metadata.generation of type int64"),
        (json!({"metadata": {"finalizers": "a"}}), "json: cannot unmarshal string into Go struct field ObjectMeta.metadata.finalizers of type []string"),
        (json!({"metadata": {"ownerReferences": [{"controller": "yes"}]}}), "json: cannot unmarshal string into Go struct field OwnerReference.metadata.ownerReferences.controller of type bool"),
        (json!({"metadata": "x"}), "json: cannot unmarshal string into Go struct field ConfigMap.metadata of type v1.ObjectMeta"),
        (json!({"binaryData": {"a": 1}}), "json: cannot unmarshal number into Go struct field ConfigMap.binaryData of type []uint8"),
        (json!({"binaryData": {"a": [1, 300]}}), "json: cannot unmarshal number 300 into Go struct field ConfigMap.binaryData of type uint8"),
        (json!({"binaryData": {"a": "YQ="}}), "illegal base64 data at input byte 3"),
        (json!({"metadata": {"creationTimestamp": 1}}), "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.creationTimestamp of type string"),
        (json!({"apiVersion": 1}), "couldn't get version/kind; json parse error: json: cannot unmarshal number into Go struct field .apiVersion of type string"),
        (json!({"kind": true}), "couldn't get version/kind; json parse error: json: cannot unmarshal bool into Go struct field .kind of type string"),
    ];
    for (object, want) in cases {
        assert_eq!(
            message(object.clone(), CONFIG_MAP).as_deref(),
            Some(want),
            "{object}"
        );
    }
}

#[test]
fn pod_fields() {
    let cases = [
        (json!({"spec": {"volumes": [{"name": "v", "hostPath": "x"}]}}), "json: cannot unmarshal string into Go struct field Volume.spec.volumes.VolumeSource.hostPath of type v1.HostPathVolumeSource"),
        (json!({"spec": {"restartPolicy": 1}}), "json: cannot unmarshal number into Go struct field PodSpec.spec.restartPolicy of type v1.RestartPolicy"),
        (json!({"spec": {"containers": ["x"]}}), "json: cannot unmarshal string into Go struct field PodSpec.spec.containers of type v1.Container"),
        (json!({"spec": {"containers": [{"securityContext": {"capabilities": {"add": [1]}}}]}}), "json: cannot unmarshal number into Go struct field Capabilities.spec.containers.securityContext.capabilities.add of type v1.Capability"),
        (json!({"spec": {"containers": [{"resources": {"limits": "x"}}]}}), "json: cannot unmarshal string into Go struct field ResourceRequirements.spec.containers.resources.limits of type v1.ResourceList"),
        (json!({"spec": {"overhead": {"cpu": "lots"}}}), "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
        (json!({"spec": {"overhead": {"cpu": {"a": 1}}}}), "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
        // A custom decoder's error ends decoding: it wins over an earlier one.
        (json!({"spec": {"activeDeadlineSeconds": "x", "overhead": {"cpu": "lots"}}}), "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
        // A noted error does not: the first in key order is told.
        (json!({"spec": {"activeDeadlineSeconds": "x", "priority": "y"}}), "json: cannot unmarshal string into Go struct field PodSpec.spec.activeDeadlineSeconds of type int64"),
        (json!({"spec": {"terminationGracePeriodSeconds": 1e-7}}), "json: cannot unmarshal number 1e-7 into Go struct field PodSpec.spec.terminationGracePeriodSeconds of type int64"),
        (json!({"spec": {"priority": 1e21}}), "json: cannot unmarshal number 1e+21 into Go struct field PodSpec.spec.priority of type int32"),
        (json!({"spec": {"priority": 1e20}}), "json: cannot unmarshal number 100000000000000000000 into Go struct field PodSpec.spec.priority of type int32"),
        (json!({"spec": {"priority": 0.000001}}), "json: cannot unmarshal number 0.000001 into Go struct field PodSpec.spec.priority of type int32"),
    ];
    for (object, want) in cases {
        assert_eq!(
            message(object.clone(), POD).as_deref(),
            Some(want),
            "{object}"
        );
    }
    for fine in [
        json!({"spec": {"overhead": {"cpu": 1.5, "memory": " 1Ki ", "x": null}}}),
        json!({"spec": {"priority": 2.0, "activeDeadlineSeconds": -0.0}}),
        json!({"spec": {"containers": [null, {"args": [null]}]}}),
    ] {
        assert_eq!(message(fine.clone(), POD), None, "{fine}");
    }
}

#[test]
fn int_or_string_decodes_a_non_string_as_int32() {
    let svc = "io.k8s.api.core.v1.Service";
    let port = |v: Value| json!({"spec": {"ports": [{"name": 1, "targetPort": v}]}});
    let want = |word: &str| {
        format!("json: cannot unmarshal {word} into Go struct field ServicePort.spec.ports.targetPort of type int32")
    };
    assert_eq!(message(port(json!(true)), svc), Some(want("bool")));
    assert_eq!(message(port(json!(1.5)), svc), Some(want("number 1.5")));
    assert_eq!(message(port(json!({"a": 1})), svc), Some(want("object")));
    assert_eq!(
        message(json!({"spec": {"ports": [{"targetPort": "http"}], "type": 6}}), svc).as_deref(),
        Some("json: cannot unmarshal number into Go struct field ServiceSpec.spec.type of type v1.ServiceType")
    );
}

#[test]
fn kinds_without_go_types_check_only_type_meta() {
    let widget = json!({"spec": {"replicas": "x"}, "metadata": {"labels": {"a": 1}}});
    assert_eq!(
        go_decode_error(&widget, Some("example.com/v1.Widget")),
        None
    );
    assert_eq!(go_decode_error(&widget, None), None);
    assert!(go_decode_error(&json!({"kind": 1}), None).is_some());
}

#[test]
fn base64_offsets_follow_go() {
    let cases: [(&str, Option<usize>); 14] = [
        ("", None),
        ("YQ==", None),
        ("YR==", None),
        ("YWJj\r\nZA==", None),
        ("YQ==\n", None),
        ("YQ", Some(0)),
        ("Y", Some(0)),
        ("YQ=", Some(3)),
        ("YQ=a", Some(2)),
        ("YQ==YQ==", Some(4)),
        ("=YQ=", Some(0)),
        ("YWI-", Some(3)),
        ("Y Q = =", Some(1)),
        ("!!", Some(0)),
    ];
    for (input, want) in cases {
        assert_eq!(base64_error(input.as_bytes()), want, "{input:?}");
    }
}

#[test]
fn time_parse_errors_follow_go() {
    let layout = "\"2006-01-02T15:04:05Z07:00\"";
    let cases = [
        ("2024-01-01T00:00:00Z", None),
        ("2024-01-01T00:00:00.123456789+05:30", None),
        ("2024-02-29T1:00:00Z", None),
        (
            "yesterday",
            Some(format!(
                "parsing time \"yesterday\" as {layout}: cannot parse \"yesterday\" as \"2006\""
            )),
        ),
        (
            "2024-01-01",
            Some(format!(
                "parsing time \"2024-01-01\" as {layout}: cannot parse \"\" as \"T\""
            )),
        ),
        (
            "2024-13-01T00:00:00Z",
            Some("parsing time \"2024-13-01T00:00:00Z\": month out of range".into()),
        ),
        (
            "2023-02-29T10:00:00+01:00",
            Some("parsing time \"2023-02-29T10:00:00+01:00\": day out of range".into()),
        ),
        (
            "2024-01-01T00:00:00Zjunk",
            Some("parsing time \"2024-01-01T00:00:00Zjunk\": extra text: \"junk\"".into()),
        ),
        (
            "2024-01-01T00:00:00",
            Some(format!(
                "parsing time \"2024-01-01T00:00:00\" as {layout}: cannot parse \"\" as \"Z07:00\""
            )),
        ),
        (
            "2024-01-01T25:00:00Z",
            Some("parsing time \"2024-01-01T25:00:00Z\": hour out of range".into()),
        ),
        (
            "é",
            Some(format!(
                "parsing time \"\\xc3\\xa9\" as {layout}: cannot parse \"\\xc3\\xa9\" as \"2006\""
            )),
        ),
    ];
    for (input, want) in cases {
        assert_eq!(time_parse_error(input, &RFC3339), want, "{input:?}");
    }
    let more = [
        ("2024-01-01T00:00:00+25:00", "parsing time \"2024-01-01T00:00:00+25:00\": time zone offset hour out of range".to_string()),
        ("2024-01-01T00:00:00x25:61", "parsing time \"2024-01-01T00:00:00x25:61\": time zone offset minute out of range".into()),
        ("2024-01-01T00:00:00.Z", format!("parsing time \"2024-01-01T00:00:00.Z\" as {layout}: cannot parse \".Z\" as \"Z07:00\"")),
        ("2024-01-01T00:00:60Z", "parsing time \"2024-01-01T00:00:60Z\": second out of range".into()),
        ("+024-01-01T00:00:00Z", format!("parsing time \"+024-01-01T00:00:00Z\" as {layout}: cannot parse \"+024-01-01T00:00:00Z\" as \"2006\"")),
        ("2024-1-01T00:00:00Z", format!("parsing time \"2024-1-01T00:00:00Z\" as {layout}: cannot parse \"1-01T00:00:00Z\" as \"01\"")),
    ];
    for (input, want) in more {
        assert_eq!(time_parse_error(input, &RFC3339), Some(want), "{input:?}");
    }
    assert_eq!(
        time_parse_error("2024-01-01T00:00:00Z", &RFC3339_MICRO).as_deref(),
        Some("parsing time \"2024-01-01T00:00:00Z\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \"Z\" as \".000000\"")
    );
    assert_eq!(
        time_parse_error("2024-01-01T00:00:00.000001Z", &RFC3339_MICRO),
        None
    );
}

#[test]
fn unstructured_conversion_errors() {
    let convert =
        |object: Value, ty: &str| go_convert_error(&object, Some(ty)).map(|e| e.to_string());
    let deployment = "io.k8s.api.apps.v1.Deployment";
    assert_eq!(
        convert(json!({"spec": {"replicas": 1.5}}), deployment).as_deref(),
        Some("cannot convert float64 to int32")
    );
    // Whole numbers convert, out of range ones too (they wrap).
    assert_eq!(
        convert(json!({"spec": {"replicas": 3000000000u64}}), deployment),
        None
    );
    assert_eq!(
        convert(json!({"binaryData": {"a": "YQ="}}), CONFIG_MAP).as_deref(),
        Some("error decoding from json: illegal base64 data at input byte 3")
    );
    assert_eq!(
        convert(json!({"metadata": {"creationTimestamp": 5}}), CONFIG_MAP).as_deref(),
        Some("json: cannot unmarshal number into Go value of type string")
    );
    assert_eq!(
        convert(
            json!({"spec": {"ports": [{"targetPort": 1.5}]}}),
            "io.k8s.api.core.v1.Service"
        )
        .as_deref(),
        Some("json: cannot unmarshal number 1.5 into Go value of type int32")
    );
    assert_eq!(
        convert(json!({"spec": {"overhead": {"cpu": true}}}), POD).as_deref(),
        Some("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    );
    assert_eq!(
        convert(json!({"spec": {"overhead": {"cpu": 1.5}}}), POD),
        None
    );
    assert_eq!(
        convert(json!({"spec": {"replicas": 1.5}}), "example.com/v1.Widget"),
        None
    );
}

/// A JSON patch's destinations through a list name its items by position:
/// only those are decoded, in the whole decoding's order, so the error met
/// first is the one the whole object's decoding would meet among them.
#[test]
fn within_a_list_only_the_items_named_by_position_are_decoded() {
    let pod = json!({"spec": {"containers": [
        {"name": "a", "ports": [{"containerPort": "x"}]},
        {"name": "b"},
        {"name": "c", "image": 5}]}});
    let within = |written: Value| {
        go_decode_error_within(&pod, Some(POD), written.as_object().unwrap()).map(|e| e.to_string())
    };
    let port = "json: cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32";
    let image = "json: cannot unmarshal number into Go struct field Container.spec.containers.image of type string";
    assert_eq!(within(json!({"spec": {"containers": {"1": null}}})), None);
    assert_eq!(
        within(json!({"spec": {"containers": {"2": null}}})).as_deref(),
        Some(image)
    );
    assert_eq!(
        within(json!({"spec": {"containers": {"2": null, "0": {"ports": null}}}})).as_deref(),
        Some(port)
    );
    // Within an item, only what is named of it.
    assert_eq!(
        within(json!({"spec": {"containers": {"0": {"name": null}}}})),
        None
    );
    // An index past the end names nothing; the whole list meets the first.
    assert_eq!(within(json!({"spec": {"containers": {"7": null}}})), None);
    assert_eq!(message(pod.clone(), POD).as_deref(), Some(port));
}
