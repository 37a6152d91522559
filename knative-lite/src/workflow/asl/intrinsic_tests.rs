//! Tests of intrinsic.rs, apart so that each file stays readable: each function's
//! example from the developer guide, and the failures.

use serde_json::json;

use super::*;

fn eval(text: &str, input: &Value) -> Result<Value, Failure> {
    let call = Intrinsic::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    call.eval(input, &json!({"Execution": {"Name": "run-1"}}))
}

#[test]
fn evaluates_the_documented_examples() {
    // Each function's example in the developer guide, plus the spec's Format example.
    let nine = json!({"inputArray": [1, 2, 3, 4, 5, 6, 7, 8, 9]});
    let cases: Vec<(&str, Value, Value)> = vec![
        (
            "States.Format('Hello, my name is {}.', $.name)",
            json!({"name": "Arnav"}),
            json!("Hello, my name is Arnav."),
        ),
        (
            "States.Format('Welcome to {} {}\\'s playlist.', $.firstName, $.lastName)",
            json!({"firstName": "John", "lastName": "Doe"}),
            json!("Welcome to John Doe's playlist."),
        ),
        (
            "States.Format('{} {} {} {}', 1.5, true, null, $.s)",
            json!({"s": "x"}),
            json!("1.5 true null x"),
        ),
        (
            "States.Format('\\{\\} \\\\ {}', 'a')",
            json!({}),
            json!("{} \\ a"),
        ),
        (
            "States.Format($.t, $.n)",
            json!({"t": "n={}", "n": 7}),
            json!("n=7"),
        ),
        (
            "States.Format('run {}', $$.Execution.Name)",
            json!({}),
            json!("run run-1"),
        ),
        (
            "States.StringToJson($.escapedJsonString)",
            json!({"escapedJsonString": "{\"foo\": \"bar\"}"}),
            json!({"foo": "bar"}),
        ),
        (
            "States.JsonToString($.unescapedJson)",
            json!({"unescapedJson": {"foo": "bar"}}),
            json!("{\"foo\":\"bar\"}"),
        ),
        (
            "States.Array('Foo', 2020, $.someJson, null)",
            json!({"someJson": {"random": "abcdefg"}}),
            json!(["Foo", 2020, {"random": "abcdefg"}, null]),
        ),
        ("States.Array()", json!({}), json!([])),
        (
            "States.ArrayPartition($.inputArray, 4)",
            nine.clone(),
            json!([[1, 2, 3, 4], [5, 6, 7, 8], [9]]),
        ),
        (
            "States.ArrayContains($.inputArray, 5)",
            nine.clone(),
            json!(true),
        ),
        (
            "States.ArrayContains($.inputArray, 5.0)",
            nine.clone(),
            json!(true),
        ),
        (
            "States.ArrayContains($.inputArray, '5')",
            nine.clone(),
            json!(false),
        ),
        (
            "States.ArrayRange(1, 9, 2)",
            json!({}),
            json!([1, 3, 5, 7, 9]),
        ),
        ("States.ArrayRange(5, 1, -2)", json!({}), json!([5, 3, 1])),
        ("States.ArrayRange(1, 0, 1)", json!({}), json!([])),
        ("States.ArrayRange(0.6, 2.4, 1)", json!({}), json!([1, 2])),
        (
            "States.ArrayGetItem($.inputArray, 5)",
            nine.clone(),
            json!(6),
        ),
        ("States.ArrayLength($.inputArray)", nine.clone(), json!(9)),
        (
            "States.ArrayUnique($.inputArray)",
            json!({"inputArray": [1, 2, 3, 3, 3, 3, 3, 3, 4]}),
            json!([1, 2, 3, 4]),
        ),
        (
            "States.Base64Encode($.input)",
            json!({"input": "Data to encode"}),
            json!("RGF0YSB0byBlbmNvZGU="),
        ),
        (
            "States.Base64Decode($.base64)",
            json!({"base64": "RGF0YSB0byBlbmNvZGU="}),
            json!("Data to encode"),
        ),
        (
            "States.Hash($.Data, $.Algorithm)",
            json!({"Data": "input data", "Algorithm": "SHA-1"}),
            json!("aaff4a450a104cd177d28d18d74485e8cae074b7"),
        ),
        (
            "States.Hash('input data', 'MD5')",
            json!({}),
            json!("812f45842bc6d66ee14572ce20db8e86"),
        ),
        (
            "States.Hash('input data', 'SHA-256')",
            json!({}),
            json!("b4a697a057313163aee33cd8d40c66e9f0f177e00cac2de32475ffff6169c3e3"),
        ),
        (
            "States.Hash('input data', 'SHA-384')",
            json!({}),
            json!(
                "d28a7d5cf25a74f11a50a18452b75e04bb3d70c9dd0510d6123aa008c756511b87525bdc835ebb27e1fb9e9374a15562"
            ),
        ),
        (
            "States.Hash('input data', 'SHA-512')",
            json!({}),
            json!(
                "6ce4adb348546d4f449c4d25aad9a7c9cb711d9e91982d3f0b29ca2f3f47d4ce2deba23bf2954f0f1d593fc50283731a533d30d425402d4f91316d871303aac4"
            ),
        ),
        (
            "States.Hash($.a, 'MD5')",
            json!({"a": "a".repeat(100)}),
            json!("36a92cc94a9e0fa21f625f8bfb007adf"),
        ),
        (
            "States.Hash($.a, 'SHA-1')",
            json!({"a": "a".repeat(100)}),
            json!("7f9000257a4918d7072655ea468540cdcbd42e0c"),
        ),
        (
            "States.JsonMerge($.json1, $.json2, false)",
            json!({"json1": {"a": {"a1": 1, "a2": 2}, "b": 2}, "json2": {"a": {"a3": 1, "a4": 2}, "c": 3}}),
            json!({"a": {"a3": 1, "a4": 2}, "b": 2, "c": 3}),
        ),
        (
            "States.MathAdd($.value1, $.step)",
            json!({"value1": 111, "step": -1}),
            json!(110),
        ),
        ("States.MathAdd(1.4, 2.6)", json!({}), json!(4)),
        (
            "States.StringSplit($.inputString, $.splitter)",
            json!({"inputString": "1,2,3,4,5", "splitter": ","}),
            json!(["1", "2", "3", "4", "5"]),
        ),
        (
            "States.StringSplit($.inputString, $.splitter)",
            json!({"inputString": "This.is+a,test=string", "splitter": ".+,="}),
            json!(["This", "is", "a", "test", "string"]),
        ),
        // Nested calls, as the guide's "States.JsonToString(States.Array(...))" style.
        (
            "States.ArrayLength(States.StringSplit(States.Format('{},{}', 'a', 'b'), ','))",
            json!({}),
            json!(2),
        ),
        (
            "States.JsonToString( States.Array( 1 , 'x' ) )",
            json!({}),
            json!("[1,\"x\"]"),
        ),
    ];
    for (text, input, want) in cases {
        assert_eq!(eval(text, &input), Ok(want), "{text}");
    }
}

#[test]
fn random_values_stay_in_range() {
    for _ in 0..50 {
        let n = eval("States.MathRandom(1, 999)", &json!({})).unwrap();
        assert!((1..999).contains(&n.as_i64().unwrap()), "{n}");
    }
    let seeded = || {
        eval(
            "States.MathRandom($.start, $.end, 7)",
            &json!({"start": 1, "end": 999}),
        )
    };
    assert_eq!(seeded(), seeded());
    let id = eval("States.UUID()", &json!({})).unwrap();
    let id = uuid::Uuid::parse_str(id.as_str().unwrap()).unwrap();
    assert_eq!(id.get_version_num(), 4);
}

#[test]
fn tells_calls() {
    let cases = [
        ("States.Format('x')", true),
        ("States.UUID()", true),
        ("States.Nope(1)", true),
        ("States.Format", false),
        ("States.('x')", false),
        ("$.States.Format('x')", false),
        ("states.Format('x')", false),
        ("hello", false),
    ];
    for (text, want) in cases {
        assert_eq!(Intrinsic::is_call(text), want, "{text}");
    }
}

#[test]
fn rejects_malformed_calls() {
    let cases = [
        ("States.Nope(1)", "unknown function 'States.Nope'"),
        ("Format('x')", "expected 'States.'"),
        ("States.Format", "expected '(' after 'States.Format'"),
        ("States.Format()", "takes at least 1 arguments, not 0"),
        ("States.UUID(1)", "takes 0 arguments, not 1"),
        ("States.MathRandom(1)", "takes 2 to 3 arguments, not 1"),
        ("States.JsonMerge($.a, $.b)", "takes 3 arguments, not 2"),
        (
            "States.Format('{} {}', 1)",
            "has 2 placeholders but 1 arguments follow it",
        ),
        ("States.Format('{', 1)", "unescaped '{'"),
        ("States.Format('a\\nb')", "invalid escape '\\n'"),
        ("States.Format('abc", "unterminated string"),
        ("States.Array(1, 2", "unterminated call"),
        ("States.Array(1 2)", "expected ',' or ')' but found '2'"),
        ("States.Array(1,)", "unexpected ')' as an argument"),
        ("States.Array(yes)", "unexpected 'yes' as an argument"),
        ("States.Array(\"x\")", "unexpected '\"' as an argument"),
        ("States.Array($.a[)", "invalid JSONPath"),
        ("States.Array(1) extra", "unexpected 'e' after the call"),
        (
            "States.Array(States.Nope())",
            "unknown function 'States.Nope'",
        ),
    ];
    for (text, want) in cases {
        let err = Intrinsic::parse(text).expect_err(text);
        assert!(
            err.starts_with(&format!("invalid intrinsic function '{text}'")),
            "{err}"
        );
        assert!(err.contains(want), "{text}: {err}");
    }
}

#[test]
fn fails_on_bad_arguments() {
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "States.Format($.t, 1)",
            json!({"t": "{} {}"}),
            "has 2 placeholders but 1",
        ),
        (
            "States.Format('{}', $.o)",
            json!({"o": {"a": 1}}),
            "argument 2 must be a string, number, boolean or null",
        ),
        (
            "States.Format($.t)",
            json!({"t": 1}),
            "argument 1 must be a string, not 1",
        ),
        (
            "States.StringToJson($.s)",
            json!({"s": "{nope"}),
            "not valid JSON",
        ),
        (
            "States.StringToJson($.s)",
            json!({"s": 5}),
            "must be a string",
        ),
        (
            "States.ArrayPartition($.a, 0)",
            json!({"a": [1]}),
            "chunk size must be a positive integer",
        ),
        (
            "States.ArrayPartition($.a, 1.5)",
            json!({"a": [1]}),
            "argument 2 must be an integer",
        ),
        (
            "States.ArrayPartition($.a, 2)",
            json!({"a": "x"}),
            "argument 1 must be an array",
        ),
        (
            "States.ArrayRange(1, 9, 0)",
            json!({}),
            "step must not be 0",
        ),
        (
            "States.ArrayRange(0, 1000, 1)",
            json!({}),
            "more than 1000 items",
        ),
        (
            "States.ArrayRange('1', 9, 1)",
            json!({}),
            "argument 1 must be a number",
        ),
        (
            "States.ArrayGetItem($.a, 3)",
            json!({"a": [1, 2]}),
            "index 3 is out of bounds",
        ),
        (
            "States.ArrayGetItem($.a, -1)",
            json!({"a": [1, 2]}),
            "index -1 is out of bounds",
        ),
        (
            "States.Base64Decode('not base64!')",
            json!({}),
            "not valid base64",
        ),
        ("States.Base64Decode('/w==')", json!({}), "not UTF-8"),
        (
            "States.Base64Encode($.s)",
            json!({"s": "a".repeat(10_001)}),
            "longer than 10000 characters",
        ),
        (
            "States.Hash('x', 'SHA-3')",
            json!({}),
            "unknown algorithm 'SHA-3'",
        ),
        (
            "States.JsonMerge($.a, $.b, true)",
            json!({"a": {}, "b": {}}),
            "only shallow merging",
        ),
        (
            "States.JsonMerge($.a, $.b, false)",
            json!({"a": {}, "b": [1]}),
            "must be JSON objects",
        ),
        (
            "States.MathRandom(5, 5)",
            json!({}),
            "start must be less than the end",
        ),
        (
            "States.MathAdd($.a, 1)",
            json!({"a": "1"}),
            "argument 1 must be a number",
        ),
        (
            "States.MathAdd($.a, 1)",
            json!({"a": i64::MAX}),
            "overflows",
        ),
        (
            "States.StringSplit($.s, ',')",
            json!({"s": null}),
            "argument 1 must be a string, not null",
        ),
    ];
    for (text, input, cause) in cases {
        let failure = eval(text, &input).unwrap_err();
        assert_eq!(failure.error, errors::INTRINSIC_FAILURE, "{text}");
        assert!(failure.cause.contains(cause), "{text}: {}", failure.cause);
    }
}

#[test]
fn a_missing_path_argument_fails_as_a_path_does() {
    let failure = eval("States.Format('{}', $.missing)", &json!({})).unwrap_err();
    assert_eq!(failure.error, errors::RUNTIME);
    assert!(failure.cause.contains("'$.missing'"), "{}", failure.cause);
}
