//! Flink's SQL dialect for `sqlparser`: backquoted identifiers, and `TABLE
//! name` as a function argument (the input of a window table-valued
//! function: `TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE)`),
//! which no built-in dialect accepts.
//!
//! `TABLE name [PARTITION BY cols]` (the partition for `SESSION`) becomes
//! `Expr::Prefixed { prefix: TABLE, value: (name, cols..) }`; the planner
//! reads it back with [`table_argument`]. Flink's `CREATE
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
        Some(table_and_partition(parser).map(|(name, keys)| {
            let table = Expr::CompoundIdentifier(
                name.0
                    .into_iter()
                    .filter_map(|p| p.as_ident().cloned())
                    .collect(),
            );
            let mut parts = vec![table];
            parts.extend(keys.into_iter().map(Expr::Identifier));
            Expr::Prefixed {
                prefix: Ident::with_span(keyword.span, TABLE_PREFIX),
                value: Box::new(Expr::Tuple(parts)),
            }
        }))
    }
}

/// `name [PARTITION BY col | PARTITION BY (col, ..)]`.
fn table_and_partition(parser: &mut Parser) -> Result<(ObjectName, Vec<Ident>), ParserError> {
    let name = parser.parse_object_name(false)?;
    let mut keys = Vec::new();
    if parser.parse_keywords(&[Keyword::PARTITION, Keyword::BY]) {
        if parser.consume_token(&Token::LParen) {
            keys = parser.parse_comma_separated(|p| p.parse_identifier())?;
            parser.expect_token(&Token::RParen)?;
        } else {
            keys.push(parser.parse_identifier()?);
        }
    }
    Ok((name, keys))
}

/// The table a `TABLE name [PARTITION BY ..]` argument names and its
/// partition columns, if `expr` is one.
pub fn table_argument(expr: &Expr) -> Option<(ObjectName, Vec<Ident>)> {
    let Expr::Prefixed { prefix, value } = expr else {
        return None;
    };
    let Expr::Tuple(parts) = &**value else {
        return None;
    };
    if prefix.value != TABLE_PREFIX {
        return None;
    }
    let (Some(Expr::CompoundIdentifier(table)), keys) = (parts.first(), &parts[1..]) else {
        return None;
    };
    let keys = keys
        .iter()
        .filter_map(|k| match k {
            Expr::Identifier(i) => Some(i.clone()),
            _ => None,
        })
        .collect();
    Some((ObjectName::from(table.clone()), keys))
}
