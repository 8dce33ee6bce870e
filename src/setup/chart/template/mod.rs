//! Go's `text/template`, as Helm runs it, for the part of the language the agent's chart uses:
//! text with `{{ }}` actions and their `{{-`/`-}}` whitespace trimming, comments, pipelines of
//! fields (`.Values.x`, `$`, `$name`), literals, parenthesised pipelines and function calls,
//! variable declarations (`$name := …`), `if`/`else if`/`else`, `with`, `range`, `define` and
//! `template`. The functions (Helm's `include`, `required`, `fail`, `toYaml` and the Sprig ones)
//! are in [`functions`].
//!
//! Why a renderer of our own: `kubectl karpenter init` installs the agent from the chart's own
//! templates, so the chart is the one source of truth, and no Rust crate renders Helm charts.
//! `gtmpl` (the one maintained Go-template crate) has no `include`, `nindent` or `toYaml` and no
//! way to add a function that calls back into the template set, which every chart needs. What
//! this module leaves out (`break`/`continue`, `block`, method calls, comparison of mixed
//! number types, `range` with index variables) the chart does not use; a template that uses it
//! fails to parse, naming the file and the action, and `agent/tests/chart.rs` renders the chart
//! with the real `helm template` and with this module and compares the objects.

mod functions;

use serde_json::Value;
use std::collections::HashMap;

/// Why a template could not be parsed or rendered.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TemplateError {
    /// The template text is not (this subset of) Go's template language.
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    /// Rendering failed: a missing template or function, a value of the wrong type.
    #[error("{file}: {message}")]
    Render { file: String, message: String },
    /// The chart refused its values (`fail`, `required`): the message names the value.
    #[error("{0}")]
    Refused(String),
}

/// One parsed piece of a template.
#[derive(Clone, Debug)]
enum Node {
    Text(String),
    /// `{{ pipeline }}`: its value is written out (a declaration writes nothing).
    Output(Pipeline),
    If {
        branches: Vec<(Pipeline, Vec<Node>)>,
        otherwise: Vec<Node>,
    },
    With {
        pipeline: Pipeline,
        body: Vec<Node>,
        otherwise: Vec<Node>,
    },
    Range {
        pipeline: Pipeline,
        body: Vec<Node>,
        otherwise: Vec<Node>,
    },
    /// `{{ template "name" pipeline }}`.
    Template {
        name: String,
        data: Option<Pipeline>,
    },
}

#[derive(Clone, Debug)]
struct Pipeline {
    /// `$name :=` (or `$name =`).
    declare: Option<String>,
    commands: Vec<Vec<Operand>>,
}

#[derive(Clone, Debug)]
enum Operand {
    /// `.` followed by fields (`.Values.x` is `["Values", "x"]`).
    Dot(Vec<String>),
    /// `$` or `$name`, followed by fields.
    Variable(String, Vec<String>),
    Literal(Value),
    Function(String),
    /// `( pipeline )`, followed by fields.
    Group(Box<Pipeline>, Vec<String>),
}

/// A set of parsed template files and the templates they `define`.
#[derive(Debug, Default)]
pub(crate) struct Templates {
    files: HashMap<String, Vec<Node>>,
    defines: HashMap<String, Vec<Node>>,
}

impl Templates {
    /// Parses `text` as the file `name`, adding its `define`s to the set.
    pub(super) fn add(&mut self, name: &str, text: &str) -> Result<(), TemplateError> {
        let error = |message: String| TemplateError::Parse {
            file: name.to_owned(),
            message,
        };
        let items = lex(text).map_err(error)?;
        let mut parser = Parser {
            items,
            at: 0,
            defines: &mut self.defines,
        };
        let (nodes, end) = parser.list().map_err(error)?;
        if let Some(keyword) = end {
            return Err(error(format!("unexpected {{{{{keyword}}}}}")));
        }
        self.files.insert(name.to_owned(), nodes);
        Ok(())
    }

    /// Renders the file `name` with `root` as `.` and `$`.
    pub(super) fn render(&self, name: &str, root: &Value) -> Result<String, TemplateError> {
        let nodes = self.files.get(name).ok_or_else(|| TemplateError::Render {
            file: name.to_owned(),
            message: "no such template file".to_owned(),
        })?;
        let mut out = String::new();
        let mut scope = Scope {
            templates: self,
            file: name,
            vars: vec![("$".to_owned(), root.clone())],
            depth: 0,
        };
        scope.walk(nodes, root, &mut out)?;
        // Helm renders a missing value as "<no value>" and then removes those.
        Ok(out.replace("<no value>", ""))
    }

    /// Renders the `define`d template `name` with `data` as `.` and `$` (Helm's `include`).
    pub(super) fn include(
        &self,
        name: &str,
        data: &Value,
        depth: usize,
        file: &str,
    ) -> Result<String, TemplateError> {
        let nodes = self
            .defines
            .get(name)
            .ok_or_else(|| TemplateError::Render {
                file: file.to_owned(),
                message: format!("no template {name:?}"),
            })?;
        // Helm stops a recursion at 1000 nested includes.
        if depth > 1000 {
            return Err(TemplateError::Render {
                file: file.to_owned(),
                message: format!("template {name:?}: includes nest too deep"),
            });
        }
        let mut out = String::new();
        let mut scope = Scope {
            templates: self,
            file,
            vars: vec![("$".to_owned(), data.clone())],
            depth: depth + 1,
        };
        scope.walk(nodes, data, &mut out)?;
        Ok(out)
    }
}

/// Text, or the inside of one action with its trim markers applied to the text around it.
#[derive(Debug, PartialEq)]
enum Item {
    Text(String),
    Action(Vec<Token>),
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Word(String),
    Dot(Vec<String>),
    Variable(String, Vec<String>),
    Literal(Value),
    Open,
    /// `)` and the fields after it.
    Close(Vec<String>),
    Pipe,
    Declare,
}

/// Splits a template into text and actions; `{{-` trims the whitespace before an action, `-}}`
/// the whitespace after it, and comments (`{{/* */}}`) vanish.
fn lex(text: &str) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut rest = text;
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        let mut before = &rest[..open];
        if trim_next {
            before = before.trim_start();
        }
        let mut inside = &rest[open + 2..];
        let trim_before = inside.starts_with("- ") || inside.starts_with("-\n");
        if trim_before {
            before = before.trim_end();
            inside = &inside[1..];
        }
        if !before.is_empty() {
            items.push(Item::Text(before.to_owned()));
        }
        let body = inside.trim_start();
        let (tokens, after) = if let Some(comment) = body.strip_prefix("/*") {
            let end = comment
                .find("*/")
                .ok_or_else(|| "unclosed comment".to_owned())?;
            (None, &comment[end + 2..])
        } else {
            let (tokens, after) = tokens(body)?;
            (Some(tokens), after)
        };
        let after = after.trim_start_matches([' ', '\t', '\n', '\r']);
        let (trim_after, after) = match after.strip_prefix("-}}") {
            Some(after) => (true, after),
            None => match after.strip_prefix("}}") {
                Some(after) => (false, after),
                None => return Err(format!("unclosed action near {:?}", preview(body))),
            },
        };
        if let Some(tokens) = tokens {
            items.push(Item::Action(tokens));
        }
        trim_next = trim_after;
        rest = after;
    }
    let last = if trim_next { rest.trim_start() } else { rest };
    if !last.is_empty() {
        items.push(Item::Text(last.to_owned()));
    }
    Ok(items)
}

fn preview(text: &str) -> String {
    text.chars().take(40).collect()
}

/// The tokens of one action, up to its closing `}}` (or ` -}}`), and the text from there.
fn tokens(mut text: &str) -> Result<(Vec<Token>, &str), String> {
    let mut tokens = Vec::new();
    loop {
        text = text.trim_start_matches([' ', '\t', '\n', '\r']);
        if text.starts_with("}}") || text.starts_with("-}}") {
            return Ok((tokens, text));
        }
        let mut chars = text.chars();
        let Some(first) = chars.next() else {
            return Err("unclosed action".to_owned());
        };
        let (token, len) = match first {
            '(' => (Token::Open, 1),
            ')' => {
                let (fields, len) = fields(&text[1..]);
                (Token::Close(fields), 1 + len)
            }
            '|' => (Token::Pipe, 1),
            ':' if text.starts_with(":=") => (Token::Declare, 2),
            '=' => (Token::Declare, 1),
            '"' => {
                let (value, len) = quoted(text)?;
                (Token::Literal(Value::String(value)), len)
            }
            '`' => {
                let end = text[1..]
                    .find('`')
                    .ok_or_else(|| "unclosed raw string".to_owned())?;
                (
                    Token::Literal(Value::String(text[1..1 + end].to_owned())),
                    end + 2,
                )
            }
            '.' => {
                let (fields, len) = fields(text);
                (Token::Dot(fields), len.max(1))
            }
            '$' => {
                let name_len = word_len(&text[1..]);
                let (fields, len) = fields(&text[1 + name_len..]);
                (
                    Token::Variable(format!("${}", &text[1..1 + name_len]), fields),
                    1 + name_len + len,
                )
            }
            c if c.is_ascii_digit()
                || (c == '-' && text[1..].starts_with(|d: char| d.is_ascii_digit())) =>
            {
                let len = 1 + text[1..]
                    .find(|d: char| !(d.is_ascii_alphanumeric() || d == '.' || d == '_'))
                    .unwrap_or(text.len() - 1);
                let number: f64 = text[..len]
                    .replace('_', "")
                    .parse()
                    .map_err(|_| format!("bad number {:?}", &text[..len]))?;
                (Token::Literal(number_value(number)), len)
            }
            c if c.is_alphabetic() || c == '_' => {
                let len = word_len(text);
                let word = &text[..len];
                let token = match word {
                    "true" => Token::Literal(Value::Bool(true)),
                    "false" => Token::Literal(Value::Bool(false)),
                    "nil" => Token::Literal(Value::Null),
                    _ => Token::Word(word.to_owned()),
                };
                (token, len)
            }
            other => return Err(format!("unexpected {other:?} in {:?}", preview(text))),
        };
        tokens.push(token);
        text = &text[len..];
    }
}

fn word_len(text: &str) -> usize {
    text.find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len())
}

/// `.a.b` after a term: the field names and the length they take.
fn fields(text: &str) -> (Vec<String>, usize) {
    let mut fields = Vec::new();
    let mut at = 0;
    while text[at..].starts_with('.') {
        let len = word_len(&text[at + 1..]);
        if len == 0 {
            // A lone `.` is the dot itself, no field.
            if at == 0 {
                return (fields, 1);
            }
            break;
        }
        fields.push(text[at + 1..at + 1 + len].to_owned());
        at += 1 + len;
    }
    (fields, at)
}

/// A `"…"` string with Go's escapes, and its length in the text.
fn quoted(text: &str) -> Result<(String, usize), String> {
    let mut value = String::new();
    let mut chars = text.char_indices().skip(1);
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Ok((value, at + 1)),
            '\\' => match chars.next().map(|(_, e)| e) {
                Some('n') => value.push('\n'),
                Some('t') => value.push('\t'),
                Some('r') => value.push('\r'),
                Some('\\') => value.push('\\'),
                Some('"') => value.push('"'),
                Some(other) => return Err(format!("unsupported escape \\{other}")),
                None => break,
            },
            c => value.push(c),
        }
    }
    Err("unclosed string".to_owned())
}

/// A number as Helm holds one from YAML: integers as integers, the rest as floats.
fn number_value(number: f64) -> Value {
    if number.fract() == 0.0 && number.abs() < 9.0e15 {
        // Integral and within f64's exact integer range, so the cast is exact.
        Value::from(number as i64)
    } else {
        serde_json::Number::from_f64(number).map_or(Value::Null, Value::Number)
    }
}

struct Parser<'a> {
    items: Vec<Item>,
    at: usize,
    defines: &'a mut HashMap<String, Vec<Node>>,
}

impl Parser<'_> {
    /// Nodes up to an `end` or `else` (returned with its tokens' first word), or the end.
    fn list(&mut self) -> Result<(Vec<Node>, Option<String>), String> {
        let mut nodes = Vec::new();
        while self.at < self.items.len() {
            let item = std::mem::replace(&mut self.items[self.at], Item::Text(String::new()));
            self.at += 1;
            let tokens = match item {
                Item::Text(text) => {
                    nodes.push(Node::Text(text));
                    continue;
                }
                Item::Action(tokens) => tokens,
            };
            let keyword = match tokens.first() {
                Some(Token::Word(word)) => word.as_str(),
                _ => "",
            };
            match keyword {
                "end" => return Ok((nodes, Some("end".to_owned()))),
                "else" => {
                    // `else if …` is kept whole for the `if` that reads it.
                    self.at -= 1;
                    self.items[self.at] = Item::Action(tokens);
                    return Ok((nodes, Some("else".to_owned())));
                }
                "if" => nodes.push(self.conditional(&tokens[1..])?),
                "with" | "range" => {
                    let pipeline = pipeline(&tokens[1..])?;
                    let (body, otherwise) = self.body_and_else(keyword)?;
                    nodes.push(if keyword == "with" {
                        Node::With {
                            pipeline,
                            body,
                            otherwise,
                        }
                    } else {
                        Node::Range {
                            pipeline,
                            body,
                            otherwise,
                        }
                    });
                }
                "define" => {
                    let Some(Token::Literal(Value::String(name))) = tokens.get(1) else {
                        return Err("define needs a quoted template name".to_owned());
                    };
                    let (body, end) = self.list()?;
                    if end.as_deref() != Some("end") {
                        return Err(format!("define {name:?} has no {{{{end}}}}"));
                    }
                    self.defines.insert(name.clone(), body);
                }
                "template" => {
                    let Some(Token::Literal(Value::String(name))) = tokens.get(1) else {
                        return Err("template needs a quoted template name".to_owned());
                    };
                    let data = (tokens.len() > 2)
                        .then(|| pipeline(&tokens[2..]))
                        .transpose()?;
                    nodes.push(Node::Template {
                        name: name.clone(),
                        data,
                    });
                }
                "block" | "break" | "continue" => {
                    return Err(format!("{{{{{keyword}}}}} is not supported here"));
                }
                _ => nodes.push(Node::Output(pipeline(&tokens)?)),
            }
        }
        Ok((nodes, None))
    }

    /// `if` with its `else if` chain; `condition` follows the `if`.
    fn conditional(&mut self, condition: &[Token]) -> Result<Node, String> {
        let mut branches = Vec::new();
        let mut condition = pipeline(condition)?;
        loop {
            let (body, end) = self.list()?;
            branches.push((condition, body));
            match end.as_deref() {
                Some("end") => {
                    return Ok(Node::If {
                        branches,
                        otherwise: Vec::new(),
                    });
                }
                Some("else") => {
                    let Item::Action(tokens) =
                        std::mem::replace(&mut self.items[self.at], Item::Text(String::new()))
                    else {
                        return Err("else without an action".to_owned());
                    };
                    self.at += 1;
                    if tokens.get(1) == Some(&Token::Word("if".to_owned())) {
                        condition = pipeline(&tokens[2..])?;
                        continue;
                    }
                    let (otherwise, end) = self.list()?;
                    if end.as_deref() != Some("end") {
                        return Err("if … else has no {{end}}".to_owned());
                    }
                    return Ok(Node::If {
                        branches,
                        otherwise,
                    });
                }
                _ => return Err("if has no {{end}}".to_owned()),
            }
        }
    }

    /// The body of a `with` or `range`, and its `else` part.
    fn body_and_else(&mut self, keyword: &str) -> Result<(Vec<Node>, Vec<Node>), String> {
        let (body, end) = self.list()?;
        match end.as_deref() {
            Some("end") => Ok((body, Vec::new())),
            Some("else") => {
                self.at += 1;
                let (otherwise, end) = self.list()?;
                if end.as_deref() != Some("end") {
                    return Err(format!("{keyword} … else has no {{{{end}}}}"));
                }
                Ok((body, otherwise))
            }
            _ => Err(format!("{keyword} has no {{{{end}}}}")),
        }
    }
}

/// A pipeline from an action's tokens: `$x := a b | c (d e)`.
fn pipeline(tokens: &[Token]) -> Result<Pipeline, String> {
    let (declare, tokens) = match tokens {
        [Token::Variable(name, fields), Token::Declare, rest @ ..] if fields.is_empty() => {
            (Some(name.clone()), rest)
        }
        _ => (None, tokens),
    };
    let mut commands = Vec::new();
    let mut command = Vec::new();
    let mut at = 0;
    while at < tokens.len() {
        match &tokens[at] {
            Token::Pipe => {
                if command.is_empty() {
                    return Err("empty command in a pipeline".to_owned());
                }
                commands.push(std::mem::take(&mut command));
            }
            Token::Open => {
                let close = matching_close(tokens, at)?;
                let Token::Close(fields) = &tokens[close] else {
                    return Err("unbalanced parentheses".to_owned());
                };
                let inner = pipeline(&tokens[at + 1..close])?;
                command.push(Operand::Group(Box::new(inner), fields.clone()));
                at = close;
            }
            Token::Close(_) => return Err("unexpected )".to_owned()),
            Token::Declare => return Err("unexpected := or =".to_owned()),
            Token::Word(word) => command.push(Operand::Function(word.clone())),
            Token::Dot(fields) => command.push(Operand::Dot(fields.clone())),
            Token::Variable(name, fields) => {
                command.push(Operand::Variable(name.clone(), fields.clone()));
            }
            Token::Literal(value) => command.push(Operand::Literal(value.clone())),
        }
        at += 1;
    }
    if command.is_empty() {
        return Err("missing value".to_owned());
    }
    commands.push(command);
    Ok(Pipeline { declare, commands })
}

fn matching_close(tokens: &[Token], open: usize) -> Result<usize, String> {
    let mut depth = 0;
    for (at, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::Open => depth += 1,
            Token::Close(_) => {
                depth -= 1;
                if depth == 0 {
                    return Ok(at);
                }
            }
            _ => {}
        }
    }
    Err("unclosed (".to_owned())
}

/// Go's truth: false, 0, nil and empty strings, lists and maps are false.
pub(super) fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// A value as `{{ }}` and `%v` print it (Go's `fmt`).
pub(super) fn print(value: &Value) -> String {
    match value {
        Value::Null => "<no value>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => print_number(n),
        Value::String(s) => s.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(print).collect::<Vec<_>>().join(" ")
        ),
        Value::Object(map) => format!(
            "map[{}]",
            map.iter()
                .map(|(k, v)| format!("{k}:{}", print(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// Helm reads every YAML number as a float64, which Go prints with `%g`: a million and up in
/// exponent form (`1e+06`), as `helm template` does.
fn print_number(n: &serde_json::Number) -> String {
    let Some(f) = n.as_f64() else {
        return n.to_string();
    };
    if f.fract() == 0.0 && f.abs() < 1e6 {
        // Integral and small, so the cast is exact.
        return (f as i64).to_string();
    }
    if f.abs() >= 1e21 || f.abs() < 1e-4 || f.fract() == 0.0 {
        let text = format!("{f:e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let exponent: i32 = exponent.parse().unwrap_or(0);
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    f.to_string()
}

/// Rendering state: the template set, the variables in scope, the include depth.
pub(super) struct Scope<'a> {
    pub(super) templates: &'a Templates,
    pub(super) file: &'a str,
    vars: Vec<(String, Value)>,
    pub(super) depth: usize,
}

impl Scope<'_> {
    pub(super) fn error(&self, message: String) -> TemplateError {
        TemplateError::Render {
            file: self.file.to_owned(),
            message,
        }
    }

    fn walk(&mut self, nodes: &[Node], dot: &Value, out: &mut String) -> Result<(), TemplateError> {
        for node in nodes {
            match node {
                Node::Text(text) => out.push_str(text),
                Node::Output(pipeline) => {
                    let value = self.pipeline(pipeline, dot)?;
                    if pipeline.declare.is_none() {
                        out.push_str(&print(&value));
                    }
                }
                Node::If {
                    branches,
                    otherwise,
                } => {
                    let vars = self.vars.len();
                    let mut taken = false;
                    for (condition, body) in branches {
                        if truthy(&self.pipeline(condition, dot)?) {
                            self.walk(body, dot, out)?;
                            taken = true;
                            break;
                        }
                    }
                    if !taken {
                        self.walk(otherwise, dot, out)?;
                    }
                    self.vars.truncate(vars);
                }
                Node::With {
                    pipeline,
                    body,
                    otherwise,
                } => {
                    let vars = self.vars.len();
                    let value = self.pipeline(pipeline, dot)?;
                    if truthy(&value) {
                        self.walk(body, &value, out)?;
                    } else {
                        self.walk(otherwise, dot, out)?;
                    }
                    self.vars.truncate(vars);
                }
                Node::Range {
                    pipeline,
                    body,
                    otherwise,
                } => {
                    let vars = self.vars.len();
                    let items: Vec<Value> = match self.pipeline(pipeline, dot)? {
                        Value::Array(items) => items,
                        // Go ranges over a map's values in key order.
                        Value::Object(map) => map.into_iter().map(|(_, v)| v).collect(),
                        Value::Null => Vec::new(),
                        other => {
                            return Err(
                                self.error(format!("range can't iterate over {}", print(&other)))
                            );
                        }
                    };
                    if items.is_empty() {
                        self.walk(otherwise, dot, out)?;
                    }
                    for item in &items {
                        self.walk(body, item, out)?;
                    }
                    self.vars.truncate(vars);
                }
                Node::Template { name, data } => {
                    let data = match data {
                        Some(pipeline) => self.pipeline(pipeline, dot)?,
                        None => Value::Null,
                    };
                    out.push_str(&self.templates.include(name, &data, self.depth, self.file)?);
                }
            }
        }
        Ok(())
    }

    fn pipeline(&mut self, pipeline: &Pipeline, dot: &Value) -> Result<Value, TemplateError> {
        let mut piped: Option<Value> = None;
        for command in &pipeline.commands {
            piped = Some(self.command(command, dot, piped)?);
        }
        let value = piped.unwrap_or(Value::Null);
        if let Some(name) = &pipeline.declare {
            self.vars.push((name.clone(), value.clone()));
        }
        Ok(value)
    }

    fn command(
        &mut self,
        command: &[Operand],
        dot: &Value,
        piped: Option<Value>,
    ) -> Result<Value, TemplateError> {
        if let [Operand::Function(name), args @ ..] = command {
            let mut values = Vec::with_capacity(args.len() + 1);
            for arg in args {
                values.push(self.operand(arg, dot)?);
            }
            values.extend(piped);
            return functions::call(self, name, values);
        }
        match (command, piped) {
            ([operand], None) => self.operand(operand, dot),
            ([_], Some(_)) => Err(self.error("a value cannot take piped input".to_owned())),
            _ => {
                Err(self.error("a command of several values must start with a function".to_owned()))
            }
        }
    }

    fn operand(&mut self, operand: &Operand, dot: &Value) -> Result<Value, TemplateError> {
        match operand {
            Operand::Dot(fields) => self.fields(dot, fields),
            Operand::Variable(name, fields) => {
                let value = self
                    .vars
                    .iter()
                    .rev()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| self.error(format!("undefined variable {name}")))?;
                self.fields(&value, fields)
            }
            Operand::Literal(value) => Ok(value.clone()),
            Operand::Function(name) => functions::call(self, name, Vec::new()),
            Operand::Group(pipeline, fields) => {
                let value = self.pipeline(pipeline, dot)?;
                self.fields(&value, fields)
            }
        }
    }

    /// Field lookups as Go does them on Helm's maps: a missing key is nil, a field of nil fails.
    fn fields(&self, value: &Value, fields: &[String]) -> Result<Value, TemplateError> {
        let mut value = value;
        for field in fields {
            value = match value {
                Value::Object(map) => map.get(field).unwrap_or(&Value::Null),
                Value::Null => {
                    return Err(
                        self.error(format!("nil pointer evaluating interface {{}}.{field}"))
                    );
                }
                other => {
                    return Err(
                        self.error(format!("can't evaluate field {field} in {}", print(other)))
                    );
                }
            };
        }
        Ok(value.clone())
    }
}

/// Renders one template text (the tests of this module and of the functions).
#[cfg(test)]
pub(super) fn render(text: &str, root: Value) -> Result<String, TemplateError> {
    let mut templates = Templates::default();
    templates.add("t.yaml", text)?;
    templates.render("t.yaml", &root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn trim_markers_remove_the_whitespace_beside_an_action_and_comments_vanish() {
        let text = "a:\n  {{- /* why */}}\n  b: {{ .x -}}\n\n  c\n{{- if .no }}x{{ end }}\n";
        assert_eq!(render(text, json!({"x": 1})).unwrap(), "a:\n  b: 1c\n");
    }

    #[test]
    fn if_else_if_with_and_range_choose_and_rebind_the_dot() {
        let text = "{{ if .a }}A{{ else if .b }}B{{ else }}C{{ end }}|{{ with .m }}{{ .k }}{{ else }}none{{ end }}|{{ range .l }}[{{ . }}]{{ else }}empty{{ end }}";
        assert_eq!(
            render(text, json!({"b": true, "m": {"k": "v"}, "l": [1, "x"]})).unwrap(),
            "B|v|[1][x]"
        );
        assert_eq!(
            render(text, json!({"a": "", "m": {}, "l": []})).unwrap(),
            "C|none|empty"
        );
    }

    #[test]
    fn variables_defines_and_include_see_the_root_through_dollar() {
        let text = r#"{{- define "n" -}}{{ $p := default "d" .Values.p }}{{ printf "%s-%s" $.Release.Name $p }}{{- end -}}
{{ include "n" . | upper }} {{ range .Values.l }}{{ $.Release.Name }}{{ . }}{{ end }}"#;
        let root = json!({"Release": {"Name": "r"}, "Values": {"l": ["a", "b"]}});
        assert_eq!(render(text, root).unwrap(), "R-D rarb");
    }

    #[test]
    fn a_missing_value_prints_nothing_and_a_field_of_a_missing_map_fails() {
        assert_eq!(
            render("[{{ .Values.x }}]", json!({"Values": {}})).unwrap(),
            "[]"
        );
        let error = render("{{ .Values.x.y }}", json!({"Values": {}})).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("nil pointer evaluating interface {}.y"),
            "{error}"
        );
    }

    #[test]
    fn numbers_print_as_helm_prints_the_float64s_it_reads_from_yaml() {
        let root = json!({"a": 8080, "b": 1_000_000, "c": 0.5, "d": 2.0});
        assert_eq!(
            render("{{ .a }} {{ .b }} {{ .c }} {{ .d }}", root).unwrap(),
            "8080 1e+06 0.5 2"
        );
    }

    #[test]
    fn what_the_renderer_does_not_support_fails_to_parse_naming_the_file() {
        let mut templates = Templates::default();
        for (text, says) in [
            ("{{ range .l }}{{ break }}{{ end }}", "not supported"),
            ("{{ if .a }}", "no {{end}}"),
            ("{{ .a ", "unclosed"),
            ("{{ end }}", "unexpected"),
        ] {
            let error = templates.add("bad.yaml", text).unwrap_err();
            assert!(error.to_string().starts_with("bad.yaml: "), "{error}");
            assert!(error.to_string().contains(says), "{text}: {error}");
        }
    }
}
