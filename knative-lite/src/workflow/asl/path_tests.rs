//! Tests of path.rs, apart so that each file stays readable: Jayway's README
//! document and the spec's and developer guide's path examples.

use serde_json::json;

use super::*;

fn store() -> Value {
    // The Jayway JsonPath README's example document.
    json!({
        "store": {
            "book": [
                {"category": "reference", "author": "Nigel Rees", "title": "Sayings of the Century", "price": 8.95},
                {"category": "fiction", "author": "Evelyn Waugh", "title": "Sword of Honour", "price": 12.99},
                {"category": "fiction", "author": "Herman Melville", "title": "Moby Dick", "isbn": "0-553-21311-3", "price": 8.99},
                {"category": "fiction", "author": "J. R. R. Tolkien", "title": "The Lord of the Rings", "isbn": "0-395-19395-8", "price": 22.99}
            ],
            "bicycle": {"color": "red", "price": 19.95}
        },
        "expensive": 10
    })
}

#[test]
fn selects_as_step_functions_does() {
    // The spec's Reference Path example, the developer guide's InputPath example, and
    // Jayway's README examples.
    let spec = json!({"foo": 123, "bar": ["a", "b", "c"], "car": {"cdr": true}});
    let guide = json!({
        "comment": "Example for InputPath.",
        "dataset1": {"val1": 1, "val2": 2, "val3": 3},
        "dataset2": {"val1": "a", "val2": "b", "val3": "c"}
    });
    let odd = json!({"a b": 1, "it's": 2, "x-y": 3, "ü": 4, "n": null});
    let cases: Vec<(&str, Value, Value)> = vec![
        ("$", spec.clone(), spec.clone()),
        ("$.foo", spec.clone(), json!(123)),
        ("$.bar", spec.clone(), json!(["a", "b", "c"])),
        ("$.car.cdr", spec.clone(), json!(true)),
        ("$['car']['cdr']", spec.clone(), json!(true)),
        ("$[\"car\"].cdr", spec.clone(), json!(true)),
        ("$.bar[0]", spec.clone(), json!("a")),
        ("$.bar[-1]", spec.clone(), json!("c")),
        ("$.bar[ 2 ]", spec.clone(), json!("c")),
        (
            "$.dataset2",
            guide.clone(),
            json!({"val1": "a", "val2": "b", "val3": "c"}),
        ),
        ("$.dataset1.val3", guide.clone(), json!(3)),
        ("$['a b']", odd.clone(), json!(1)),
        ("$['it\\'s']", odd.clone(), json!(2)),
        ("$.x-y", odd.clone(), json!(3)),
        ("$.ü", odd.clone(), json!(4)),
        ("$.n", odd.clone(), Value::Null),
        ("$.bar[*]", spec.clone(), json!(["a", "b", "c"])),
        ("$.car.*", spec.clone(), json!([true])),
        ("$.bar[1:]", spec.clone(), json!(["b", "c"])),
        ("$.bar[:2]", spec.clone(), json!(["a", "b"])),
        ("$.bar[-2:]", spec.clone(), json!(["b", "c"])),
        ("$.bar[0:3:2]", spec.clone(), json!(["a", "c"])),
        ("$.bar[1::9223372036854775807]", spec.clone(), json!(["b"])),
        ("$.bar[5:9]", spec.clone(), json!([])),
        ("$.bar[0,2]", spec.clone(), json!(["a", "c"])),
        ("$['foo','car']", spec.clone(), json!([123, {"cdr": true}])),
        ("$.nothing[*]", spec.clone(), json!([])),
        (
            "$.store.book[*].author",
            store(),
            json!([
                "Nigel Rees",
                "Evelyn Waugh",
                "Herman Melville",
                "J. R. R. Tolkien"
            ]),
        ),
        (
            "$..author",
            store(),
            json!([
                "Nigel Rees",
                "Evelyn Waugh",
                "Herman Melville",
                "J. R. R. Tolkien"
            ]),
        ),
        (
            "$.store..price",
            store(),
            json!([19.95, 8.95, 12.99, 8.99, 22.99]),
        ),
        ("$..book[2].title", store(), json!(["Moby Dick"])),
        (
            "$..book[-1:].title",
            store(),
            json!(["The Lord of the Rings"]),
        ),
        (
            "$..book[?(@.isbn)].title",
            store(),
            json!(["Moby Dick", "The Lord of the Rings"]),
        ),
        (
            "$.store.book[?(@.price < 10)].title",
            store(),
            json!(["Sayings of the Century", "Moby Dick"]),
        ),
        (
            "$.store.book[?(@.price <= $.expensive)].price",
            store(),
            json!([8.95, 8.99]),
        ),
        (
            "$.store.book[?(@.category == 'fiction' && @.price > 20)].title",
            store(),
            json!(["The Lord of the Rings"]),
        ),
        (
            "$.store.book[?(@.category != \"fiction\" || @.price >= 22.99)].title",
            store(),
            json!(["Sayings of the Century", "The Lord of the Rings"]),
        ),
        (
            "$.store.book[?(!@.isbn)].title",
            store(),
            json!(["Sayings of the Century", "Sword of Honour"]),
        ),
        (
            "$.store.book[?((@.price > 9) && !(@.price > 20))].title",
            store(),
            json!(["Sword of Honour"]),
        ),
        ("$.v[?(@ > 1)]", json!({"v": [1, 2, 3]}), json!([2, 3])),
        (
            "$.v[?(@.a == true || @.a == null)]",
            json!({"v": [{"a": true}, {"a": null}, {"a": "true"}, {"b": 1}]}),
            json!([{"a": true}, {"a": null}]),
        ),
        (
            "$.v[?(@.a == 1)]",
            json!({"v": [{"a": 1.0}, {"a": "1"}]}),
            json!([{"a": 1.0}]),
        ),
        (
            "$.v[?(@.a < 'b')]",
            json!({"v": [{"a": "a"}, {"a": "c"}, {"a": 1}]}),
            json!([{"a": "a"}]),
        ),
    ];
    for (path, input, want) in cases {
        let parsed = Path::parse(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(parsed.text(), path);
        let got = parsed.select(&input, &Value::Null);
        assert_eq!(got, Ok(want), "{path}");
    }
}

#[test]
fn reads_the_context_object() {
    let context = json!({
        "Execution": {"Id": "arn:x", "Input": {"a": 1}},
        "Map": {"Item": {"Index": 2, "Value": {"k": "v"}}}
    });
    let input = json!({"Execution": "not this"});
    let cases = [
        ("$$.Execution.Input", json!({"a": 1})),
        ("$$.Map.Item.Value", json!({"k": "v"})),
        ("$$.Map.Item.Index", json!(2)),
        ("$$", context.clone()),
    ];
    for (text, want) in cases {
        let path = Path::parse(text).unwrap();
        assert!(path.is_context() && path.is_reference(), "{text}");
        assert_eq!(path.select(&input, &context), Ok(want), "{text}");
    }
    assert!(!Path::parse("$.a").unwrap().is_context());
}

#[test]
fn tells_reference_paths() {
    let cases = [
        ("$", true),
        ("$.a.b", true),
        ("$['a b'][0]", true),
        ("$.a[-1]", true),
        ("$$.Execution.Id", true),
        ("$.a[*]", false),
        ("$.a.*", false),
        ("$.a[1:2]", false),
        ("$.a[0,1]", false),
        ("$['a','b']", false),
        ("$..a", false),
        ("$.a[?(@.b)]", false),
    ];
    for (text, want) in cases {
        assert_eq!(Path::parse(text).unwrap().is_reference(), want, "{text}");
    }
}

#[test]
fn rejects_malformed_paths() {
    let cases = [
        ("", "must start with '$'"),
        ("a.b", "must start with '$'"),
        ("$.", "expected a name after '.'"),
        ("$.a.", "expected a name after '.'"),
        ("$.a[", "unterminated '['"),
        ("$.a[0", "expected ']' but the path ended"),
        ("$.a[x]", "expected an index"),
        ("$['a", "unterminated quoted name"),
        ("$a", "unexpected 'a' at position 1"),
        ("$.a b", "unexpected ' ' at position 3"),
        ("$.a[::0]", "step must be positive"),
        ("$.a[?(@.b ==)]", "unexpected ')' in filter"),
        ("$.a[?(1)]", "needs a comparison or a path"),
        ("$.a[?(@.b == nope)]", "unexpected 'nope' in filter"),
        ("$.a[?(@.b == 1]", "expected ')'"),
    ];
    for (text, want) in cases {
        let err = Path::parse(text).expect_err(text);
        assert!(
            err.starts_with(&format!("invalid JSONPath '{text}'")),
            "{err}"
        );
        assert!(err.contains(want), "{text}: {err}");
    }
}

#[test]
fn a_missing_reference_is_a_runtime_error() {
    let input = json!({"a": {"b": [1]}, "s": "text"});
    for (text, normalized) in [
        ("$.x", "$['x']"),
        ("$.a.c", "$['a']['c']"),
        ("$.a.b[3]", "$['a']['b'][3]"),
        ("$.s.length", "$['s']['length']"),
        ("$.a[0]", "$['a'][0]"),
    ] {
        let path = Path::parse(text).unwrap();
        assert_eq!(path.find(&input, &Value::Null), None, "{text}");
        let failure = path.select(&input, &Value::Null).unwrap_err();
        assert_eq!(failure.error, errors::RUNTIME);
        assert_eq!(
            failure.cause,
            format!("Invalid path '{text}' : No results for path: {normalized}")
        );
    }
    let missing_context = Path::parse("$$.Map.Item").unwrap();
    assert!(missing_context.select(&input, &json!({})).is_err());
}

#[test]
fn inserts_results() {
    // The spec's and the developer guide's ResultPath examples, and the edges.
    let cases: Vec<(Value, &str, Value, Value)> = vec![
        (json!({"a": 1}), "$", json!("r"), json!("r")),
        (
            json!({"comment": "This is a test of the input and output of a Task state.", "details": "Default example", "who": "AWS Step Functions"}),
            "$.taskresult",
            json!("Hello, AWS Step Functions!"),
            json!({"comment": "This is a test of the input and output of a Task state.", "details": "Default example", "who": "AWS Step Functions", "taskresult": "Hello, AWS Step Functions!"}),
        ),
        (
            json!({"title": "Numbers to add", "numbers": {"val1": 3, "val2": 4}}),
            "$.sum",
            json!(7),
            json!({"title": "Numbers to add", "numbers": {"val1": 3, "val2": 4}, "sum": 7}),
        ),
        (
            json!({"master": {"detail": [1, 2, 3]}}),
            "$.master.detail",
            json!(6),
            json!({"master": {"detail": 6}}),
        ),
        (
            json!({}),
            "$.a.b.c",
            json!(1),
            json!({"a": {"b": {"c": 1}}}),
        ),
        (
            json!({"a": {"x": 0}}),
            "$['a']['b c']",
            json!(1),
            json!({"a": {"x": 0, "b c": 1}}),
        ),
        (
            json!({"a": [1, 2, 3]}),
            "$.a[1]",
            json!("two"),
            json!({"a": [1, "two", 3]}),
        ),
        (
            json!({"a": [1, 2, 3]}),
            "$.a[-1]",
            json!(9),
            json!({"a": [1, 2, 9]}),
        ),
        (
            json!({"a": [{"b": 1}]}),
            "$.a[0].c",
            json!(2),
            json!({"a": [{"b": 1, "c": 2}]}),
        ),
    ];
    for (input, text, result, want) in cases {
        let path = Path::parse(text).unwrap();
        assert_eq!(insert(input, &path, result), Ok(want), "{text}");
    }
}

#[test]
fn insert_fails_through_non_objects() {
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!("hello"),
            "$.a",
            "Unable to apply step \"a\" to input \"hello\"",
        ),
        (
            json!({"a": "text"}),
            "$.a.b",
            "Unable to apply step \"b\" to input \"text\"",
        ),
        (
            json!({"a": null}),
            "$.a.b",
            "Unable to apply step \"b\" to input null",
        ),
        (
            json!({"a": [1]}),
            "$.a[3]",
            "Unable to apply step \"3\" to input [1]",
        ),
        (
            json!({"a": {}}),
            "$.a[0]",
            "Unable to apply step \"0\" to input {}",
        ),
        (
            json!([1, 2]),
            "$.a",
            "Unable to apply step \"a\" to input [1,2]",
        ),
        (json!({}), "$.a[*]", "is not a reference path"),
        (
            json!({}),
            "$$.Execution",
            "cannot write to the context object",
        ),
    ];
    for (input, text, cause) in cases {
        let path = Path::parse(text).unwrap();
        let failure = insert(input, &path, json!(1)).unwrap_err();
        assert_eq!(failure.error, errors::RESULT_PATH_MATCH_FAILURE, "{text}");
        assert!(failure.cause.contains(cause), "{text}: {}", failure.cause);
    }
}

#[test]
fn parse_prefix_stops_where_the_path_ends() {
    let cases = [
        ("$.a, 'x')", "$.a"),
        ("$['a,b'])", "$['a,b']"),
        ("$.a[?(@.b == ')')].c)", "$.a[?(@.b == ')')].c"),
        ("$$.Map.Item.Value)", "$$.Map.Item.Value"),
        ("$ ,1", "$"),
    ];
    for (text, want) in cases {
        let (path, used) = parse_prefix(text).unwrap();
        assert_eq!((path.text(), used), (want, want.len()), "{text}");
    }
}

#[test]
fn compares_numbers_exactly() {
    let big = |n: u64| Number::from(n);
    assert_eq!(
        compare_numbers(&big(u64::MAX), &big(u64::MAX - 1)),
        Some(Ordering::Greater)
    );
    assert_eq!(
        compare_numbers(&Number::from(-1), &big(u64::MAX)),
        Some(Ordering::Less)
    );
    let half = Number::from_f64(0.5).unwrap();
    assert_eq!(
        compare_numbers(&half, &Number::from(1)),
        Some(Ordering::Less)
    );
}
