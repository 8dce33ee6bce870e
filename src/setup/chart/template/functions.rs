//! The template functions the agent's chart calls: Go's builtins (`and`, `or`, `not`, `eq`,
//! `ne`, `printf`, `len`), Helm's (`include`, `required`, `fail`, `toYaml`) and Sprig's (`default`,
//! `quote`, `nindent`, `indent`, `trim`, `trunc`, `trimSuffix`, `replace`, `contains`,
//! `hasPrefix`, `join`, `list`, `has`, `upper`, `lower`), each with its upstream argument order
//! (Sprig takes the piped value last: `contains SUBSTRING STRING`). An unknown function fails
//! the render, naming it, as Go's parser does.

use super::{Scope, TemplateError, print, truthy};
use serde_json::Value;

/// Calls the function `name` with its arguments (a piped value comes last).
pub(super) fn call(
    scope: &Scope<'_>,
    name: &str,
    args: Vec<Value>,
) -> Result<Value, TemplateError> {
    let arity = |n: usize| -> Result<(), TemplateError> {
        if args.len() == n {
            Ok(())
        } else {
            Err(scope.error(format!(
                "wrong number of args for {name}: want {n} got {}",
                args.len()
            )))
        }
    };
    let text = |at: usize| -> String { args.get(at).map(string_of).unwrap_or_default() };
    Ok(match name {
        "and" | "or" => {
            if args.is_empty() {
                return Err(scope.error(format!("{name} needs arguments")));
            }
            // Go returns the first operand that decides the result, else the last.
            let wanted = name == "or";
            args.iter()
                .find(|a| truthy(a) == wanted)
                .or(args.last())
                .cloned()
                .unwrap_or(Value::Null)
        }
        "not" => {
            arity(1)?;
            Value::Bool(!truthy(&args[0]))
        }
        "eq" | "ne" => {
            if args.len() < 2 {
                return Err(scope.error(format!("{name} needs two arguments")));
            }
            let equal = args[1..].iter().any(|other| same(&args[0], other));
            Value::Bool(equal == (name == "eq"))
        }
        "len" => {
            arity(1)?;
            let n = match &args[0] {
                Value::String(s) => s.len(),
                Value::Array(a) => a.len(),
                Value::Object(o) => o.len(),
                other => return Err(scope.error(format!("len of {}", print(other)))),
            };
            Value::from(n)
        }
        "printf" => {
            let Some(Value::String(format)) = args.first() else {
                return Err(scope.error("printf needs a format string".to_owned()));
            };
            Value::String(printf(format, &args[1..]))
        }
        "include" => {
            let Some(Value::String(template)) = args.first() else {
                return Err(scope.error("include needs a template name".to_owned()));
            };
            let data = args.get(1).cloned().unwrap_or(Value::Null);
            Value::String(
                scope
                    .templates
                    .include(template, &data, scope.depth, scope.file)?,
            )
        }
        "required" => {
            arity(2)?;
            match &args[1] {
                Value::Null => return Err(TemplateError::Refused(text(0))),
                Value::String(s) if s.is_empty() => return Err(TemplateError::Refused(text(0))),
                value => value.clone(),
            }
        }
        "fail" => return Err(TemplateError::Refused(text(0))),
        "toYaml" => {
            arity(1)?;
            Value::String(to_yaml(&args[0]).map_err(|e| scope.error(format!("toYaml: {e}")))?)
        }
        "default" => {
            // `default D` with nothing given (no piped value) is D.
            match args.get(1) {
                Some(given) if truthy(given) => given.clone(),
                _ => args.first().cloned().unwrap_or(Value::Null),
            }
        }
        "quote" => Value::String(
            args.iter()
                .filter(|a| !a.is_null())
                .map(|a| go_quote(&string_of(a)))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        "nindent" | "indent" => {
            arity(2)?;
            let spaces = count(scope, &args[0])?;
            let indented = indent(spaces, &text(1));
            Value::String(if name == "nindent" {
                format!("\n{indented}")
            } else {
                indented
            })
        }
        "trim" => {
            arity(1)?;
            Value::String(text(0).trim().to_owned())
        }
        "upper" => {
            arity(1)?;
            Value::String(text(0).to_uppercase())
        }
        "lower" => {
            arity(1)?;
            Value::String(text(0).to_lowercase())
        }
        "trunc" => {
            arity(2)?;
            let n = count(scope, &args[0])?;
            let s = text(1);
            // Sprig cuts bytes; the chart only cuts ASCII names, where bytes are characters.
            Value::String(s.chars().take(n).collect())
        }
        "trimSuffix" => {
            arity(2)?;
            let (suffix, s) = (text(0), text(1));
            Value::String(s.strip_suffix(suffix.as_str()).unwrap_or(&s).to_owned())
        }
        "replace" => {
            arity(3)?;
            Value::String(text(2).replace(&text(0), &text(1)))
        }
        "contains" => {
            arity(2)?;
            Value::Bool(text(1).contains(&text(0)))
        }
        "hasPrefix" => {
            arity(2)?;
            Value::Bool(text(1).starts_with(&text(0)))
        }
        "join" => {
            arity(2)?;
            let items = match &args[1] {
                Value::Array(items) => items.iter().map(string_of).collect::<Vec<_>>(),
                Value::Null => Vec::new(),
                other => vec![string_of(other)],
            };
            Value::String(items.join(&text(0)))
        }
        "list" => Value::Array(args),
        "has" => {
            arity(2)?;
            let found = match &args[1] {
                Value::Array(items) => items.iter().any(|i| same(i, &args[0])),
                _ => false,
            };
            Value::Bool(found)
        }
        other => return Err(scope.error(format!("function {other:?} not defined"))),
    })
}

/// Go's `eq` on the basic values a chart holds; numbers compare by value.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// Sprig's `strval`: a string as it is, anything else as `%v` prints it.
fn string_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => print(other),
    }
}

fn count(scope: &Scope<'_>, value: &Value) -> Result<usize, TemplateError> {
    value
        .as_f64()
        .filter(|n| *n >= 0.0)
        // Non-negative, and a width or length far below usize's range.
        .map(|n| n as usize)
        .ok_or_else(|| scope.error(format!("{} is not a count", print(value))))
}

/// Sprig's `indent`: every line, empty ones too, gets the spaces.
fn indent(spaces: usize, text: &str) -> String {
    let pad = " ".repeat(spaces);
    format!("{pad}{}", text.replace('\n', &format!("\n{pad}")))
}

/// Go's `%q` of a string (`strconv.Quote`).
fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `fmt.Sprintf` for the verbs a chart uses: `%s`, `%v`, `%d`, `%t`, `%q` and `%%`.
fn printf(format: &str, args: &[Value]) -> String {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.next() else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        match verb {
            'q' => out.push_str(&go_quote(&string_of(arg))),
            's' | 'v' | 'd' | 't' => out.push_str(&string_of(arg)),
            other => out.push_str(&format!("%!{other}({})", print(arg))),
        }
    }
    out
}

/// Helm's `toYaml`: the value as block YAML with sorted keys, without the final newline.
fn to_yaml(value: &Value) -> Result<String, serde_saphyr::SerializeError> {
    let text = serde_saphyr::to_string(value)?;
    Ok(text.strip_suffix('\n').unwrap_or(&text).to_owned())
}

#[cfg(test)]
mod tests {
    use super::super::render;
    use super::*;
    use serde_json::json;

    #[test]
    fn sprig_functions_take_the_piped_value_last() {
        let root = json!({"name": "karpenter-agent-", "l": ["a", "b"]});
        let text = r#"{{ .name | trunc 10 }} {{ .name | trimSuffix "-" }} {{ contains "agent" .name }} {{ hasPrefix "karp" .name }} {{ join "," .l }} {{ has "b" .l }} {{ "1+2" | replace "+" "_" }}"#;
        assert_eq!(
            render(text, root).unwrap(),
            "karpenter- karpenter-agent true true a,b true 1_2"
        );
    }

    #[test]
    fn quote_printf_and_default_print_as_go_does() {
        let root = json!({"s": "a \"b\"", "t": true, "n": 8080, "empty": ""});
        let text = r#"{{ .s | quote }} {{ .t | quote }} {{ printf "%s:%v/%t %q" "x" .n .t "y" }} {{ default "d" .empty }} {{ default "d" .s }}"#;
        assert_eq!(
            render(text, root).unwrap(),
            r#""a \"b\"" "true" x:8080/true "y" d a "b""#
        );
    }

    #[test]
    fn and_or_return_the_operand_that_decides_and_eq_compares_numbers_by_value() {
        let text = r#"{{ and "a" "" "b" }}|{{ or "" "x" }}|{{ not "" }}|{{ eq 2 2.0 }}|{{ eq "aws" "gcp" "aws" }}|{{ ne 1 2 }}"#;
        assert_eq!(render(text, json!({})).unwrap(), "|x|true|true|true|true");
    }

    #[test]
    fn to_yaml_and_nindent_indent_a_block_under_its_key() {
        let root = json!({"m": {"b": [1, {"c": "true"}], "a": "x"}});
        let text = "spec:\n  {{- toYaml .m | nindent 2 }}\n";
        let rendered = render(text, root.clone()).unwrap();
        let parsed: Value = serde_saphyr::from_str(&rendered).unwrap();
        assert_eq!(parsed, json!({"spec": root["m"]}), "{rendered}");
        assert!(rendered.starts_with("spec:\n  a: x\n"), "{rendered}");
    }

    #[test]
    fn required_and_fail_refuse_with_the_charts_own_message() {
        let required = render(r#"{{ required "x is required" .x }}"#, json!({"x": ""}));
        assert_eq!(
            required,
            Err(TemplateError::Refused("x is required".to_owned()))
        );
        let fail = render(r#"{{ fail (printf "not %q" "y") }}"#, json!({}));
        assert_eq!(fail, Err(TemplateError::Refused("not \"y\"".to_owned())));
        let unknown = render("{{ tpl .x . }}", json!({"x": ""})).unwrap_err();
        assert!(
            unknown.to_string().contains("function \"tpl\" not defined"),
            "{unknown}"
        );
    }
}
