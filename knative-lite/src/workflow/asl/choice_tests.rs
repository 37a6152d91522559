//! Tests of choice.rs, apart so that each file stays readable: the spec's and the
//! developer guide's choice rule examples, and malformed rules.

use serde_json::json;

use super::super::errors;
use super::*;

fn check(rule: Value, input: Value) -> Result<bool, Failure> {
    let parsed = Rule::parse(&rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
    parsed.matches(&input, &json!({"Execution": {"Name": "run-1"}}))
}

#[test]
fn matches_as_the_spec_says() {
    let cases: Vec<(Value, Value, bool)> = vec![
        // The spec's Choice state example.
        (
            json!({"Not": {"Variable": "$.type", "StringEquals": "Private"}, "Next": "Public"}),
            json!({"type": "Public"}),
            true,
        ),
        (
            json!({"Not": {"Variable": "$.type", "StringEquals": "Private"}, "Next": "Public"}),
            json!({"type": "Private"}),
            false,
        ),
        (
            json!({"And": [
                {"Variable": "$.value", "IsPresent": true},
                {"Variable": "$.value", "IsNumeric": true},
                {"Variable": "$.value", "NumericGreaterThanEquals": 20},
                {"Variable": "$.value", "NumericLessThan": 30}
            ], "Next": "ValueInTwenties"}),
            json!({"value": 25}),
            true,
        ),
        (
            json!({"And": [
                {"Variable": "$.value", "IsPresent": true},
                {"Variable": "$.value", "IsNumeric": true},
                {"Variable": "$.value", "NumericGreaterThanEquals": 20}
            ]}),
            json!({"other": 1}),
            false,
        ),
        (
            json!({"Variable": "$.rating", "NumericGreaterThanPath": "$.auditThreshold", "Next": "StartAudit"}),
            json!({"rating": 53, "auditThreshold": 50}),
            true,
        ),
        (
            json!({"Variable": "$.rating", "NumericGreaterThanPath": "$.auditThreshold"}),
            json!({"rating": 50, "auditThreshold": 50}),
            false,
        ),
        // The developer guide's comparison examples.
        (
            json!({"Variable": "$.foo", "NumericEquals": 1}),
            json!({"foo": 1}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "NumericEquals": 1}),
            json!({"foo": 1.0}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "NumericEquals": 1}),
            json!({"foo": "1"}),
            false,
        ),
        (
            json!({"Variable": "$.foo", "NumericLessThanEquals": 1.5}),
            json!({"foo": 1.5}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "NumericGreaterThan": -1}),
            json!({"foo": 0}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "NumericLessThan": 5}),
            json!({"foo": null}),
            false,
        ),
        (
            json!({"Variable": "$.foo", "StringEquals": "bar"}),
            json!({"foo": "bar"}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "StringEquals": "1"}),
            json!({"foo": 1}),
            false,
        ),
        (
            json!({"Variable": "$.foo", "StringLessThan": "b"}),
            json!({"foo": "a"}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "StringGreaterThan": "b"}),
            json!({"foo": "a"}),
            false,
        ),
        (
            json!({"Variable": "$.foo", "StringLessThanEquals": "a"}),
            json!({"foo": "a"}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "StringGreaterThanEquals": "a"}),
            json!({"foo": "ab"}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "StringEqualsPath": "$.bar"}),
            json!({"foo": "x", "bar": "x"}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "StringEqualsPath": "$.bar"}),
            json!({"foo": "1", "bar": 1}),
            false,
        ),
        (
            json!({"Variable": "$.foo", "BooleanEquals": true}),
            json!({"foo": true}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "BooleanEquals": true}),
            json!({"foo": "true"}),
            false,
        ),
        (
            json!({"Variable": "$.foo", "BooleanEqualsPath": "$.bar"}),
            json!({"foo": false, "bar": false}),
            true,
        ),
        (
            json!({"Variable": "$.ts", "TimestampEquals": "2001-01-01T12:00:00Z"}),
            json!({"ts": "2001-01-01T12:00:00Z"}),
            true,
        ),
        (
            json!({"Variable": "$.ts", "TimestampEquals": "2001-01-01T12:00:00Z"}),
            json!({"ts": "2001-01-01T13:00:00+01:00"}),
            true,
        ),
        (
            json!({"Variable": "$.ts", "TimestampLessThan": "2016-03-14T01:59:00Z"}),
            json!({"ts": "2016-03-14T01:58:59.999Z"}),
            true,
        ),
        (
            json!({"Variable": "$.ts", "TimestampGreaterThan": "2016-03-14T01:59:00Z"}),
            json!({"ts": "2016-03-14T01:59:00Z"}),
            false,
        ),
        (
            json!({"Variable": "$.ts", "TimestampGreaterThanEquals": "2016-03-14T01:59:00Z"}),
            json!({"ts": "2016-03-14T01:59:00Z"}),
            true,
        ),
        (
            json!({"Variable": "$.ts", "TimestampLessThanEquals": "2016-03-14T01:59:00Z"}),
            json!({"ts": "2016-03-14t01:00:00z"}),
            false,
        ),
        (
            json!({"Variable": "$.ts", "TimestampLessThan": "2016-03-14T01:59:00Z"}),
            json!({"ts": 20160314}),
            false,
        ),
        (
            json!({"Variable": "$.ts", "TimestampLessThanPath": "$.limit"}),
            json!({"ts": "2020-01-01T00:00:00Z", "limit": "2021-01-01T00:00:00Z"}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "StringMatches": "log-*.txt"}),
            json!({"foo": "log-2024-01.txt"}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "StringMatches": "log-*.txt"}),
            json!({"foo": "log-.txt"}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "StringMatches": "log-*.txt"}),
            json!({"foo": "log-1.txt.gz"}),
            false,
        ),
        (
            json!({"Variable": "$.foo", "StringMatches": "*"}),
            json!({"foo": ""}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "StringMatches": "a*b*c"}),
            json!({"foo": "abxbxc"}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "StringMatches": "a*b*c"}),
            json!({"foo": "abxbx"}),
            false,
        ),
        (
            json!({"Variable": "$.foo", "StringMatches": "\\*star"}),
            json!({"foo": "*star"}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "StringMatches": "\\*star"}),
            json!({"foo": "a star"}),
            false,
        ),
        (
            json!({"Variable": "$.foo", "StringMatches": "back\\\\slash"}),
            json!({"foo": "back\\slash"}),
            true,
        ),
        (
            json!({"Variable": "$.foo", "StringMatches": "1*"}),
            json!({"foo": 12}),
            false,
        ),
        // The type tests.
        (
            json!({"Variable": "$.v", "IsNull": true}),
            json!({"v": null}),
            true,
        ),
        (
            json!({"Variable": "$.v", "IsNull": false}),
            json!({"v": 0}),
            true,
        ),
        (
            json!({"Variable": "$.v", "IsNumeric": true}),
            json!({"v": "1"}),
            false,
        ),
        (
            json!({"Variable": "$.v", "IsString": true}),
            json!({"v": "1"}),
            true,
        ),
        (
            json!({"Variable": "$.v", "IsBoolean": true}),
            json!({"v": false}),
            true,
        ),
        (
            json!({"Variable": "$.v", "IsBoolean": false}),
            json!({"v": false}),
            false,
        ),
        (
            json!({"Variable": "$.v", "IsTimestamp": true}),
            json!({"v": "2016-03-14T01:59:00Z"}),
            true,
        ),
        (
            json!({"Variable": "$.v", "IsTimestamp": true}),
            json!({"v": "2016-03-14 01:59:00Z"}),
            false,
        ),
        (
            json!({"Variable": "$.v", "IsTimestamp": true}),
            json!({"v": "2016-13-14T01:59:00Z"}),
            false,
        ),
        (
            json!({"Variable": "$.v", "IsTimestamp": true}),
            json!({"v": "2016-03-14T01:59Z"}),
            false,
        ),
        (
            json!({"Variable": "$.v", "IsPresent": true}),
            json!({"v": null}),
            true,
        ),
        (
            json!({"Variable": "$.v", "IsPresent": true}),
            json!({}),
            false,
        ),
        (
            json!({"Variable": "$.v", "IsPresent": false}),
            json!({}),
            true,
        ),
        (
            json!({"Variable": "$.a.b[2]", "IsPresent": true}),
            json!({"a": {"b": [1]}}),
            false,
        ),
        // Or, short-circuiting past a missing field; the context object.
        (
            json!({"Or": [
                {"Variable": "$.kind", "StringEquals": "a"},
                {"Variable": "$.missing", "StringEquals": "b"}
            ]}),
            json!({"kind": "a"}),
            true,
        ),
        (
            json!({"Or": [{"Variable": "$.kind", "StringEquals": "x"}, {"Variable": "$.kind", "StringEquals": "y"}]}),
            json!({"kind": "a"}),
            false,
        ),
        (
            json!({"Variable": "$$.Execution.Name", "StringEquals": "run-1"}),
            json!({}),
            true,
        ),
        (json!({"Variable": "$", "NumericEquals": 3}), json!(3), true),
    ];
    for (rule, input, want) in cases {
        assert_eq!(
            check(rule.clone(), input.clone()),
            Ok(want),
            "{rule} on {input}"
        );
    }
}

#[test]
fn a_missing_variable_is_a_runtime_error() {
    let cases = [
        (
            json!({"Variable": "$.foo", "StringEquals": "x"}),
            json!({}),
            "$.foo",
        ),
        (
            json!({"Variable": "$.foo", "IsNull": true}),
            json!({}),
            "$.foo",
        ),
        (
            json!({"Variable": "$.foo", "IsNumeric": false}),
            json!({}),
            "$.foo",
        ),
        (
            json!({"Variable": "$.foo", "NumericEqualsPath": "$.bar"}),
            json!({"foo": 1}),
            "$.bar",
        ),
        (
            json!({"Not": {"Variable": "$.foo", "BooleanEquals": true}}),
            json!({"foo2": true}),
            "$.foo",
        ),
    ];
    for (rule, input, path) in cases {
        let failure = check(rule.clone(), input).unwrap_err();
        assert_eq!(failure.error, errors::RUNTIME, "{rule}");
        assert_eq!(
            failure.cause,
            format!(
                "Invalid path '{path}': The choice state's condition path references an invalid value."
            )
        );
    }
}

#[test]
fn rejects_malformed_rules() {
    let cases = [
        (json!("x"), "a choice rule must be an object"),
        (json!({"Next": "A"}), "a rule needs an operator"),
        (
            json!({"Variable": "$.a", "Next": "A"}),
            "a rule needs an operator",
        ),
        (
            json!({"Variable": "$.a", "StringEquals": "x", "NumericEquals": 1}),
            "a rule takes exactly one operator",
        ),
        (
            json!({"Variable": "$.a", "StringEqual": "x"}),
            "unknown field 'StringEqual'",
        ),
        (
            json!({"Variable": "$.a", "BooleanLessThan": true}),
            "unknown field 'BooleanLessThan'",
        ),
        (
            json!({"Variable": "$.a", "StringMatchesPath": "$.b"}),
            "unknown field 'StringMatchesPath'",
        ),
        (
            json!({"StringEquals": "x"}),
            "'Variable' is required with 'StringEquals'",
        ),
        (
            json!({"Variable": "a", "StringEquals": "x"}),
            "Variable: invalid JSONPath 'a'",
        ),
        (
            json!({"Variable": 1, "StringEquals": "x"}),
            "Variable: expected a path",
        ),
        (
            json!({"Variable": "$.a", "NumericEquals": "1"}),
            "NumericEquals: expected a number",
        ),
        (
            json!({"Variable": "$.a", "StringEquals": 1}),
            "StringEquals: expected a string",
        ),
        (
            json!({"Variable": "$.a", "BooleanEquals": "true"}),
            "BooleanEquals: expected true or false",
        ),
        (
            json!({"Variable": "$.a", "TimestampEquals": "2016-03-14"}),
            "TimestampEquals: expected an RFC 3339 timestamp",
        ),
        (
            json!({"Variable": "$.a", "TimestampEquals": "2016-03-14t01:59:00z"}),
            "TimestampEquals: expected an RFC 3339",
        ),
        (
            json!({"Variable": "$.a", "StringMatches": 5}),
            "StringMatches: expected a string",
        ),
        (
            json!({"Variable": "$.a", "IsNull": "yes"}),
            "IsNull: expected true or false",
        ),
        (
            json!({"Variable": "$.a", "IsPresent": 1}),
            "IsPresent: expected true or false",
        ),
        (
            json!({"Variable": "$.a", "NumericEqualsPath": 3}),
            "NumericEqualsPath: expected a path",
        ),
        (
            json!({"Variable": "$.a", "NumericEqualsPath": "$.b["}),
            "NumericEqualsPath: invalid JSONPath",
        ),
        (json!({"And": []}), "And: expected at least one rule"),
        (json!({"Or": {}}), "Or: expected an array of rules"),
        (
            json!({"Variable": "$.a", "And": [{"Variable": "$.a", "IsNull": true}]}),
            "'Variable' is not allowed with 'And'",
        ),
        (
            json!({"And": [{"Variable": "$.a", "IsNull": true}, {"Variable": "$.a", "IsNull": true, "Next": "B"}]}),
            "And[1]: a nested rule must not have 'Next'",
        ),
        (
            json!({"Not": {"Variable": "$.a", "Next": "B", "IsNull": true}}),
            "Not: a nested rule must not have 'Next'",
        ),
        (
            json!({"Not": [{"Variable": "$.a", "IsNull": true}]}),
            "Not: a choice rule must be an object",
        ),
        (
            json!({"Or": [{"Not": {"StringEquals": "x"}}]}),
            "Or[0]: Not: 'Variable' is required",
        ),
    ];
    for (rule, want) in cases {
        let err = Rule::parse(&rule).expect_err(&rule.to_string());
        assert!(err.starts_with(want), "{rule}: {err}");
    }
}

#[test]
fn accepts_comments() {
    let rule = json!({"Comment": "why", "Variable": "$.a", "IsNull": true, "Next": "A"});
    assert!(Rule::parse(&rule).is_ok());
    let nested = json!({"Not": {"Comment": "inner", "Variable": "$.a", "IsNull": true}});
    assert!(Rule::parse(&nested).is_ok());
}
