//! Flink's SQL dialect for `sqlparser`: backquoted identifiers, and `TABLE
//! name` as a function argument (the input of a window table-valued
//! function: `TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE)`),
//! which no built-in dialect accepts.
//!
//! `TABLE name` becomes `Expr::Prefixed { prefix: TABLE, value: name }`;
//! the planner reads it back with [`table_argument`]. Flink's `CREATE
//! TABLE` (computed columns, `WATERMARK FOR`) is parsed by
//! [`parse`](super::parse), which drives the same parser.

use sqlparser::ast::{Expr, Ident, ObjectName};
use sqlparser::dialect::Dialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

/// Flink SQL, as far as floe parses it.
#[derive(Debug, Default, Clone, Copy)]
pub struct FlinkDialect;

/// The prefix that marks a `TABLE name` argument.
const TABLE_PREFIX: &str = "TABLE";

impl Dialect for FlinkDialect {
    fn is_identifier_start(&self, ch: char) -> bool {
        ch.is_alphabetic() || ch == '_' || ch == '$'
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        ch.is_alphanumeric() || ch == '_' || ch == '$'
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        ch == '`'
    }

    fn supports_string_literal_backslash_escape(&self) -> bool {
        false
    }

    fn parse_prefix(&self, parser: &mut Parser) -> Option<Result<Expr, ParserError>> {
        // `TABLE name` (not `TABLE(`): a table as a function argument.
        let next = parser.peek_nth_token(1);
        let is_table = matches!(
            &parser.peek_token().token,
            Token::Word(w) if w.keyword == Keyword::TABLE && w.quote_style.is_none()
        ) && matches!(next.token, Token::Word(_));
        if !is_table {
            return None;
        }
        let keyword = parser.next_token();
        Some(parser.parse_object_name(false).map(|name| {
            Expr::Prefixed {
                prefix: Ident::with_span(keyword.span, TABLE_PREFIX),
                value: Box::new(Expr::CompoundIdentifier(
                    name.0
                        .into_iter()
                        .filter_map(|p| p.as_ident().cloned())
                        .collect(),
                )),
            }
        }))
    }
}

/// The table a `TABLE name` argument names, if `expr` is one.
pub fn table_argument(expr: &Expr) -> Option<ObjectName> {
    match expr {
        Expr::Prefixed { prefix, value } if prefix.value == TABLE_PREFIX => match &**value {
            Expr::CompoundIdentifier(parts) => Some(ObjectName::from(parts.clone())),
            _ => None,
        },
        _ => None,
    }
}
