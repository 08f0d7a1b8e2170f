//! A script of Flink SQL statements into statements the planner takes.
//!
//! The parser is `sqlparser`'s, with [`FlinkDialect`]. Flink's `CREATE
//! TABLE` (computed columns `c AS expr`, `WATERMARK FOR ts AS ts -
//! INTERVAL '5' SECOND`, `PRIMARY KEY (..) NOT ENFORCED`, `WITH ('k' =
//! 'v')`) and `CREATE TEMPORARY VIEW` are read here with the parser's own
//! token methods; every other statement by the parser itself. Every node
//! keeps its span, so a planning error names its line and column.

use super::dialect::FlinkDialect;
use super::error::{SqlError, SqlResult, err};
use sqlparser::ast::{DataType, Expr, Ident, ObjectName, Query, Statement as Ast, TableObject};
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Span, Token};

/// One statement of a script.
#[derive(Debug, Clone)]
pub enum Statement {
    /// `CREATE TABLE`.
    CreateTable(Box<TableDef>),
    /// `CREATE [TEMPORARY] VIEW name AS query`.
    CreateView {
        /// The view.
        name: Ident,
        /// Its query.
        query: Box<Query>,
    },
    /// `INSERT INTO table [(columns)] query`.
    Insert {
        /// The sink table.
        table: ObjectName,
        /// The columns written, when listed.
        columns: Vec<Ident>,
        /// The rows.
        query: Box<Query>,
        /// Where the statement starts.
        span: Span,
    },
    /// `EXPLAIN [PLAN FOR] statement`.
    Explain(Box<Statement>, Span),
    /// `SET 'key' = 'value'`.
    Set {
        /// The option.
        key: String,
        /// Its value.
        value: String,
        /// Where the statement starts.
        span: Span,
    },
    /// A bare query (not run: it has nowhere to go).
    Query(Box<Query>, Span),
}

/// `CREATE TABLE`, as written.
#[derive(Debug, Clone)]
pub struct TableDef {
    /// The table's name.
    pub name: Ident,
    /// Its columns, physical and computed, in order.
    pub columns: Vec<ColumnDef>,
    /// The `WATERMARK FOR` clause.
    pub watermark: Option<WatermarkDef>,
    /// `PRIMARY KEY (..) NOT ENFORCED`.
    pub primary_key: Vec<Ident>,
    /// The `WITH` options, keys as written, with their spans.
    pub options: Vec<(String, String, Span)>,
    /// `IF NOT EXISTS`.
    pub if_not_exists: bool,
}

/// A column of `CREATE TABLE`.
#[derive(Debug, Clone)]
pub struct ColumnDef {
    /// The column's name.
    pub name: Ident,
    /// Read from the connector, or computed.
    pub kind: ColumnKind,
}

/// Where a column's values come from.
#[derive(Debug, Clone)]
pub enum ColumnKind {
    /// From the connector, of this type (and where the type is written).
    Physical(DataType, Span),
    /// `name AS expr`: computed from the other columns of the row.
    Computed(Box<Expr>),
    /// `name TYPE METADATA [FROM 'key'] [VIRTUAL]`: a value the connector
    /// gives beside the row (the key, where written, and its span).
    Metadata(DataType, Span, Option<(String, Span)>),
}

/// `WATERMARK FOR column AS expr`.
#[derive(Debug, Clone)]
pub struct WatermarkDef {
    /// The event-time column.
    pub column: Ident,
    /// The watermark of a row.
    pub expr: Expr,
}

/// The statements of `script`, or its first syntax error.
pub fn parse_script(script: &str) -> SqlResult<Vec<Statement>> {
    let dialect = FlinkDialect;
    let mut parser = Parser::new(&dialect)
        .try_with_sql(script)
        .map_err(SqlError::syntax)?;
    let mut out = Vec::new();
    loop {
        while parser.consume_token(&Token::SemiColon) {}
        if parser.peek_token().token == Token::EOF {
            return Ok(out);
        }
        out.push(statement(&mut parser)?);
        let next = parser.peek_token();
        if !matches!(next.token, Token::SemiColon | Token::EOF) {
            return Err(err!(
                Syntax,
                next.span,
                "expected ';' after the statement, found {}",
                next.token
            ));
        }
    }
}

fn statement(p: &mut Parser) -> SqlResult<Statement> {
    let start = p.peek_token().span;
    if p.parse_keyword(Keyword::EXPLAIN) {
        let _ = p.parse_keywords(&[Keyword::PLAN, Keyword::FOR]);
        return Ok(Statement::Explain(Box::new(statement(p)?), start));
    }
    if p.parse_keyword(Keyword::SET) {
        let key = p.parse_literal_string().map_err(SqlError::syntax)?;
        p.expect_token(&Token::Eq).map_err(SqlError::syntax)?;
        let value = p.parse_literal_string().map_err(SqlError::syntax)?;
        return Ok(Statement::Set {
            key,
            value,
            span: start,
        });
    }
    if p.parse_keyword(Keyword::CREATE) {
        let _ = p.parse_keyword(Keyword::TEMPORARY);
        if p.parse_keyword(Keyword::TABLE) {
            return create_table(p).map(|t| Statement::CreateTable(Box::new(t)));
        }
        if p.parse_keyword(Keyword::VIEW) {
            let _ = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
            let name = p.parse_identifier().map_err(SqlError::syntax)?;
            p.expect_keyword(Keyword::AS).map_err(SqlError::syntax)?;
            let query = p.parse_query().map_err(SqlError::syntax)?;
            return Ok(Statement::CreateView { name, query });
        }
        return Err(err!(
            Unsupported,
            p.peek_token().span,
            "only CREATE TABLE and CREATE [TEMPORARY] VIEW are supported"
        ));
    }
    match p.parse_statement().map_err(SqlError::syntax)? {
        Ast::Insert(insert) => {
            let TableObject::TableName(table) = insert.table else {
                return Err(err!(Unsupported, start, "INSERT INTO a table function"));
            };
            let Some(query) = insert.source else {
                return Err(err!(Unsupported, start, "INSERT without a query"));
            };
            if insert.overwrite {
                return Err(err!(
                    Unsupported,
                    start,
                    "INSERT OVERWRITE is not supported"
                ));
            }
            Ok(Statement::Insert {
                table,
                columns: insert.columns,
                query,
                span: start,
            })
        }
        Ast::Query(query) => Ok(Statement::Query(query, start)),
        other => Err(err!(
            Unsupported,
            start,
            "unsupported statement: {}",
            first_words(&other.to_string())
        )),
    }
}

/// The first words of a statement, for a message.
fn first_words(text: &str) -> String {
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether the next token is the (unquoted) word `word`.
fn peek_word(p: &Parser, word: &str) -> bool {
    matches!(&p.peek_token().token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

fn create_table(p: &mut Parser) -> SqlResult<TableDef> {
    let syntax = SqlError::syntax;
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = p.parse_identifier().map_err(syntax)?;
    let mut def = TableDef {
        name,
        columns: Vec::new(),
        watermark: None,
        primary_key: Vec::new(),
        options: Vec::new(),
        if_not_exists,
    };
    p.expect_token(&Token::LParen).map_err(syntax)?;
    loop {
        let at = p.peek_token().span;
        if peek_word(p, "WATERMARK") {
            p.next_token();
            p.expect_keyword(Keyword::FOR).map_err(syntax)?;
            let column = p.parse_identifier().map_err(syntax)?;
            p.expect_keyword(Keyword::AS).map_err(syntax)?;
            let expr = p.parse_expr().map_err(syntax)?;
            if def.watermark.is_some() {
                return Err(err!(Invalid, at, "a table has at most one WATERMARK"));
            }
            def.watermark = Some(WatermarkDef { column, expr });
        } else if p.parse_keywords(&[Keyword::PRIMARY, Keyword::KEY])
            || (p.parse_keyword(Keyword::CONSTRAINT) && {
                p.parse_identifier().map_err(syntax)?;
                p.expect_keywords(&[Keyword::PRIMARY, Keyword::KEY])
                    .map_err(syntax)?;
                true
            })
        {
            p.expect_token(&Token::LParen).map_err(syntax)?;
            def.primary_key = p
                .parse_comma_separated(|p| p.parse_identifier())
                .map_err(syntax)?;
            p.expect_token(&Token::RParen).map_err(syntax)?;
            not_enforced(p)?;
        } else {
            let name = p.parse_identifier().map_err(syntax)?;
            let kind = if p.parse_keyword(Keyword::AS) {
                ColumnKind::Computed(Box::new(p.parse_expr().map_err(syntax)?))
            } else {
                let span = p.peek_token().span;
                let ty = p.parse_data_type().map_err(syntax)?;
                loop {
                    if p.parse_keywords(&[Keyword::NOT, Keyword::NULL])
                        || p.parse_keyword(Keyword::NULL)
                    {
                        continue;
                    }
                    if p.parse_keywords(&[Keyword::PRIMARY, Keyword::KEY]) {
                        not_enforced(p)?;
                        def.primary_key = vec![name.clone()];
                        continue;
                    }
                    if p.parse_keyword(Keyword::COMMENT) {
                        p.parse_literal_string().map_err(syntax)?;
                        continue;
                    }
                    break;
                }
                if peek_word(p, "METADATA") {
                    p.next_token();
                    let key = match p.parse_keyword(Keyword::FROM) {
                        true => {
                            let at = p.peek_token().span;
                            Some((p.parse_literal_string().map_err(syntax)?, at))
                        }
                        false => None,
                    };
                    let _ = p.parse_keyword(Keyword::VIRTUAL);
                    ColumnKind::Metadata(ty, span, key)
                } else {
                    ColumnKind::Physical(ty, span)
                }
            };
            def.columns.push(ColumnDef { name, kind });
        }
        if p.consume_token(&Token::Comma) {
            continue;
        }
        p.expect_token(&Token::RParen).map_err(syntax)?;
        break;
    }
    if p.parse_keyword(Keyword::COMMENT) {
        p.parse_literal_string().map_err(syntax)?;
    }
    if p.parse_keyword(Keyword::PARTITIONED) {
        return Err(err!(
            Unsupported,
            p.peek_token().span,
            "PARTITIONED BY is not supported"
        ));
    }
    p.expect_keyword(Keyword::WITH).map_err(syntax)?;
    p.expect_token(&Token::LParen).map_err(syntax)?;
    loop {
        let span = p.peek_token().span;
        let key = p.parse_literal_string().map_err(syntax)?;
        p.expect_token(&Token::Eq).map_err(syntax)?;
        let value = p.parse_literal_string().map_err(syntax)?;
        def.options.push((key, value, span));
        if !p.consume_token(&Token::Comma) {
            break;
        }
    }
    p.expect_token(&Token::RParen).map_err(syntax)?;
    Ok(def)
}

/// `NOT ENFORCED` after a primary key, which Flink requires.
fn not_enforced(p: &mut Parser) -> SqlResult<()> {
    let at = p.peek_token().span;
    if p.parse_keywords(&[Keyword::NOT, Keyword::ENFORCED]) {
        return Ok(());
    }
    Err(err!(
        Unsupported,
        at,
        "a PRIMARY KEY must be NOT ENFORCED: Flink does not own the data, so it cannot \
         enforce the key"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flink_ddl_parses_with_computed_columns_and_watermarks() {
        let script = "CREATE TABLE clicks (\n  user_id STRING,\n  amount DECIMAL(10, 2),\n  \
                      total AS amount * 2,\n  ts TIMESTAMP(3),\n  \
                      WATERMARK FOR ts AS ts - INTERVAL '5' SECOND,\n  \
                      PRIMARY KEY (user_id) NOT ENFORCED\n) WITH ('connector' = 'filesystem', \
                      'path' = '/tmp/x', 'format' = 'csv');\n\
                      INSERT INTO out SELECT window_start, COUNT(*) FROM \
                      TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '10' MINUTES)) \
                      GROUP BY window_start, window_end;";
        let stmts = parse_script(script).expect("parses");
        assert_eq!(stmts.len(), 2);
        let Statement::CreateTable(t) = &stmts[0] else {
            panic!("{:?}", stmts[0]);
        };
        assert_eq!(t.columns.len(), 4);
        assert!(matches!(t.columns[2].kind, ColumnKind::Computed(_)));
        assert_eq!(
            t.watermark.as_ref().map(|w| w.column.value.as_str()),
            Some("ts")
        );
        assert_eq!(t.primary_key.len(), 1);
        assert_eq!(t.options.len(), 3);
        assert!(matches!(stmts[1], Statement::Insert { .. }));
    }

    #[test]
    fn syntax_errors_name_their_line_and_column() {
        let e = parse_script("CREATE TABLE t (a INT) WITH ('x' = 'y');\nSELEC 1;")
            .expect_err("not SQL");
        assert_eq!(e.kind, super::super::error::SqlErrorKind::Syntax);
        assert_eq!(e.line, 2, "{e}");
        let e = parse_script("CREATE TABLE t (a INT PRIMARY KEY) WITH ('x' = 'y')")
            .expect_err("enforced key");
        assert!(e.to_string().contains("NOT ENFORCED"), "{e}");
    }
}
