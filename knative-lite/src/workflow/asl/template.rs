//! Payload templates (Parameters, ResultSelector, ItemSelector): JSON copied as written,
//! except that a field whose name ends in `.$` takes its value from a path or an
//! intrinsic call. Templates are parsed with the definition, so a bad path or call is
//! reported when the state machine is submitted, naming the field; evaluation can then
//! only fail on what the input holds.

use serde_json::{Map, Value};

use super::intrinsic::Intrinsic;
use super::path::Path;
use super::{Failure, errors};

#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    root: Node,
}

#[derive(Clone, Debug, PartialEq)]
enum Node {
    /// A value with nothing dynamic in it.
    Static(Value),
    Object(Vec<(String, Node)>),
    Array(Vec<Node>),
    /// A `name.$` field's value; `field` is the name as written, for messages.
    Path {
        field: String,
        path: Path,
    },
    Call {
        field: String,
        call: Intrinsic,
    },
}

impl Template {
    pub fn parse(template: &Value) -> Result<Template, String> {
        Ok(Template {
            root: parse_node(template, "")?,
        })
    }

    pub fn apply(&self, input: &Value, context: &Value) -> Result<Value, Failure> {
        apply_node(&self.root, input, context)
    }
}

fn parse_node(value: &Value, location: &str) -> Result<Node, String> {
    match value {
        Value::Object(map) => {
            let mut fields = Vec::with_capacity(map.len());
            let mut dynamic = false;
            for (key, value) in map {
                let at = if location.is_empty() {
                    key.clone()
                } else {
                    format!("{location}.{key}")
                };
                let Some(name) = key.strip_suffix(".$") else {
                    let node = parse_node(value, &at)?;
                    dynamic |= !matches!(node, Node::Static(_));
                    fields.push((key.clone(), node));
                    continue;
                };
                if map.contains_key(name) {
                    return Err(format!(
                        "field '{at}': its value would replace field '{name}', which is also given"
                    ));
                }
                dynamic = true;
                fields.push((name.to_string(), parse_dynamic(value, &at)?));
            }
            Ok(if dynamic {
                Node::Object(fields)
            } else {
                Node::Static(value.clone())
            })
        }
        Value::Array(items) => {
            let nodes = items
                .iter()
                .enumerate()
                .map(|(i, item)| parse_node(item, &format!("{location}[{i}]")))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(if nodes.iter().all(|n| matches!(n, Node::Static(_))) {
                Node::Static(value.clone())
            } else {
                Node::Array(nodes)
            })
        }
        other => Ok(Node::Static(other.clone())),
    }
}

/// The value of a `name.$` field: a path or an intrinsic call.
fn parse_dynamic(value: &Value, field: &str) -> Result<Node, String> {
    let Value::String(text) = value else {
        return Err(format!(
            "field '{field}': expected a string holding a path or an intrinsic function, not {value}"
        ));
    };
    let field = field.to_string();
    if Intrinsic::is_call(text) {
        let call = Intrinsic::parse(text).map_err(|e| format!("field '{field}': {e}"))?;
        return Ok(Node::Call { field, call });
    }
    let path = Path::parse(text).map_err(|e| format!("field '{field}': {e}"))?;
    Ok(Node::Path { field, path })
}

fn apply_node(node: &Node, input: &Value, context: &Value) -> Result<Value, Failure> {
    match node {
        Node::Static(value) => Ok(value.clone()),
        Node::Object(fields) => {
            let mut out = Map::new();
            for (name, node) in fields {
                out.insert(name.clone(), apply_node(node, input, context)?);
            }
            Ok(Value::Object(out))
        }
        Node::Array(items) => items
            .iter()
            .map(|item| apply_node(item, input, context))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Node::Path { field, path } => path.find(input, context).ok_or_else(|| {
            let (what, source) = if path.is_context() {
                ("context object", context)
            } else {
                ("input", input)
            };
            Failure::new(
                errors::RUNTIME,
                format!(
                    "The JSONPath '{}' specified for the field '{field}' could not be found in the {what} '{source}'",
                    path.text()
                ),
            )
        }),
        Node::Call { call, .. } => call.eval(input, context),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn apply(template: Value, input: Value, context: Value) -> Result<Value, Failure> {
        let parsed = Template::parse(&template).unwrap_or_else(|e| panic!("{template}: {e}"));
        parsed.apply(&input, &context)
    }

    #[test]
    fn fills_templates() {
        let guide_input = json!({
            "comment": "Example for Parameters.",
            "product": {
                "details": {"color": "blue", "size": "small", "material": "cotton"},
                "availability": "in stock",
                "sku": "2317",
                "cost": "$23"
            }
        });
        let cases: Vec<(Value, Value, Value, Value)> = vec![
            // The developer guide's Parameters example.
            (
                json!({
                    "comment": "Selecting what I care about.",
                    "MyDetails": {
                        "size.$": "$.product.details.size",
                        "exists.$": "$.product.availability",
                        "StaticValue": "foo"
                    }
                }),
                guide_input,
                json!({}),
                json!({
                    "comment": "Selecting what I care about.",
                    "MyDetails": {"size": "small", "exists": "in stock", "StaticValue": "foo"}
                }),
            ),
            // The developer guide's ResultSelector example.
            (
                json!({"ClusterId.$": "$.output.ClusterId", "ResourceType.$": "$.resourceType"}),
                json!({
                    "resourceType": "elasticmapreduce",
                    "resource": "createCluster.sync",
                    "output": {"SdkHttpMetadata": {"HttpStatusCode": 200}, "ClusterId": "AKIAIOSFODNN7EXAMPLE"}
                }),
                json!({}),
                json!({"ClusterId": "AKIAIOSFODNN7EXAMPLE", "ResourceType": "elasticmapreduce"}),
            ),
            // The spec's Parameters example: slices, the context object and an intrinsic.
            (
                json!({
                    "flagged": true,
                    "parts": {"first.$": "$.vals[0]", "last3.$": "$.vals[-3:]"},
                    "weekday.$": "$$.DayOfWeek",
                    "formattedOutput.$": "States.Format('Today is {}', $$.DayOfWeek)"
                }),
                json!({"flagged": 7, "vals": [0, 10, 20, 30, 40, 50]}),
                json!({"DayOfWeek": "TUESDAY"}),
                json!({
                    "flagged": true,
                    "parts": {"first": 0, "last3": [30, 40, 50]},
                    "weekday": "TUESDAY",
                    "formattedOutput": "Today is TUESDAY"
                }),
            ),
            // A Map state's ItemSelector.
            (
                json!({"ContextIndex.$": "$$.Map.Item.Index", "ContextValue.$": "$$.Map.Item.Value"}),
                json!({}),
                json!({"Map": {"Item": {"Index": 1, "Value": {"who": "bob"}}}}),
                json!({"ContextIndex": 1, "ContextValue": {"who": "bob"}}),
            ),
            // Dynamic fields inside arrays; a static "x.$"-free array copied as is.
            (
                json!({"list": [1, {"a.$": "$.a"}, [{"b.$": "$"}]], "plain": [{"c": "$.a"}]}),
                json!({"a": null}),
                json!({}),
                json!({"list": [1, {"a": null}, [{"b": {"a": null}}]], "plain": [{"c": "$.a"}]}),
            ),
            // A static value that merely looks like a path, and a non-object template.
            (
                json!({"p": "$.a"}),
                json!({"a": 1}),
                json!({}),
                json!({"p": "$.a"}),
            ),
            (json!("text"), json!({}), json!({}), json!("text")),
            (
                json!({"all.$": "$", "none": null}),
                json!([1]),
                json!({}),
                json!({"all": [1], "none": null}),
            ),
            (
                json!({"m.$": "$.v[*].n"}),
                json!({"v": []}),
                json!({}),
                json!({"m": []}),
            ),
        ];
        for (template, input, context, want) in cases {
            assert_eq!(
                apply(template.clone(), input, context),
                Ok(want),
                "{template}"
            );
        }
    }

    #[test]
    fn rejects_bad_templates() {
        let cases = [
            (
                json!({"greeting.$": "$.a["}),
                "field 'greeting.$': invalid JSONPath '$.a['",
            ),
            (
                json!({"a": {"b.$": "nope"}}),
                "field 'a.b.$': invalid JSONPath 'nope'",
            ),
            (
                json!({"a": [{}, {"b.$": 3}]}),
                "field 'a[1].b.$': expected a string holding a path",
            ),
            (
                json!({"f.$": "States.Nope()"}),
                "field 'f.$': invalid intrinsic function 'States.Nope()'",
            ),
            (
                json!({"f.$": "States.Format('{}')"}),
                "field 'f.$': invalid intrinsic function",
            ),
            (
                json!({"a": 1, "a.$": "$.x"}),
                "field 'a.$': its value would replace field 'a'",
            ),
        ];
        for (template, want) in cases {
            let err = Template::parse(&template).expect_err(&template.to_string());
            assert!(err.starts_with(want), "{template}: {err}");
        }
    }

    #[test]
    fn a_missing_path_is_a_runtime_error() {
        let failure = apply(json!({"x.$": "$.x"}), json!({"a": 1}), json!({})).unwrap_err();
        assert_eq!(
            failure,
            Failure::runtime(
                "The JSONPath '$.x' specified for the field 'x.$' could not be found in the input '{\"a\":1}'"
            )
        );
        let failure = apply(
            json!({"n": {"i.$": "$$.Map.Item.Index"}}),
            json!({}),
            json!({}),
        )
        .unwrap_err();
        assert_eq!(failure.error, errors::RUNTIME);
        assert!(
            failure.cause.contains("field 'n.i.$'") && failure.cause.contains("context object")
        );
        let failure = apply(
            json!({"f.$": "States.StringToJson($.s)"}),
            json!({"s": "{"}),
            json!({}),
        )
        .unwrap_err();
        assert_eq!(failure.error, errors::INTRINSIC_FAILURE);
    }
}
