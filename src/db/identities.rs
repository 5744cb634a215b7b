//! Queries of `patient_identity` (a provider's `(issuer, subject)` → the patient) and
//! `service_key` (keys the instances share). See the migration `m20261207_000020` for why a
//! patient made on first sign-in is the row's own key.

use rand::RngCore;
use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};

use super::{Db, StoreError};

/// The store port the authenticator reads identity links through.
#[async_trait::async_trait]
pub trait PatientLinks: Send + Sync {
    /// The patient linked to `(issuer, subject)`, made (a new patient id) on first use.
    async fn patient_for(&self, issuer: &str, subject: &str) -> Result<i64, StoreError>;
}

/// `sql` written with `$1, $2, …` (each once, in order) for `backend`.
fn statement(backend: DbBackend, sql: &str, values: Vec<Value>) -> Statement {
    let sql = match backend {
        DbBackend::Postgres => sql.to_owned(),
        _ => {
            let mut out = String::with_capacity(sql.len());
            let mut chars = sql.chars().peekable();
            while let Some(c) = chars.next() {
                if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
                    while chars.peek().is_some_and(char::is_ascii_digit) {
                        chars.next();
                    }
                    out.push('?');
                } else {
                    out.push(c);
                }
            }
            out
        }
    };
    Statement::from_sql_and_values(backend, sql, values)
}

/// The patient linked to `(issuer, subject)`, if any.
pub async fn find(conn: &impl ConnectionTrait, issuer: &str, subject: &str) -> Result<Option<i64>, StoreError> {
    let stmt = statement(
        conn.get_database_backend(),
        "SELECT COALESCE(patient_id, id) AS patient FROM patient_identity WHERE issuer = $1 AND subject = $2",
        vec![issuer.into(), subject.into()],
    );
    match conn.query_one_raw(stmt).await? {
        Some(row) => Ok(Some(row.try_get::<i64>("", "patient")?)),
        None => Ok(None),
    }
}

/// Links `(issuer, subject)` to `patient_id` (`Some`), or to a new patient (`None`: the row's
/// own key). `false` when the identity already had a link, which is kept.
pub async fn insert(
    conn: &impl ConnectionTrait,
    issuer: &str,
    subject: &str,
    patient_id: Option<i64>,
) -> Result<bool, StoreError> {
    let stmt = statement(
        conn.get_database_backend(),
        "INSERT INTO patient_identity (issuer, subject, patient_id) VALUES ($1, $2, $3) \
         ON CONFLICT (issuer, subject) DO NOTHING",
        vec![issuer.into(), subject.into(), patient_id.into()],
    );
    Ok(conn.execute_raw(stmt).await?.rows_affected() == 1)
}

/// Removes the link of `(issuer, subject)`; `false` when there was none.
pub async fn delete(conn: &impl ConnectionTrait, issuer: &str, subject: &str) -> Result<bool, StoreError> {
    let stmt = statement(
        conn.get_database_backend(),
        "DELETE FROM patient_identity WHERE issuer = $1 AND subject = $2",
        vec![issuer.into(), subject.into()],
    );
    Ok(conn.execute_raw(stmt).await?.rows_affected() > 0)
}

#[async_trait::async_trait]
impl PatientLinks for Db {
    async fn patient_for(&self, issuer: &str, subject: &str) -> Result<i64, StoreError> {
        if let Some(id) = find(self.conn(), issuer, subject).await? {
            return Ok(id);
        }
        {
            // A race with another first request inserts nothing here: the unique
            // `(issuer, subject)` keeps one row, which both then read.
            let _writing = self.writing().await;
            insert(self.conn(), issuer, subject, None).await?;
        }
        find(self.conn(), issuer, subject)
            .await?
            .ok_or_else(|| StoreError::Inconsistent("a patient identity vanished after its insert".into()))
    }
}

/// The key named `name`, made (32 random bytes, hex) by the first instance that asks.
pub async fn service_key(db: &Db, name: &str) -> Result<String, StoreError> {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    {
        let _writing = db.writing().await;
        let stmt = statement(
            db.backend(),
            "INSERT INTO service_key (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            vec![name.into(), hex::encode(bytes).into()],
        );
        db.conn().execute_raw(stmt).await?;
    }
    let stmt = statement(db.backend(), "SELECT value FROM service_key WHERE name = $1", vec![name.into()]);
    let row = db
        .conn()
        .query_one_raw(stmt)
        .await?
        .ok_or_else(|| StoreError::Inconsistent(format!("service key {name} vanished after its insert")))?;
    Ok(row.try_get::<String>("", "value")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_suit_the_backend() {
        let s = statement(DbBackend::Sqlite, "a = $1 AND b = $12", vec![1.into(), 2.into()]);
        assert_eq!(s.sql, "a = ? AND b = ?");
        assert_eq!(statement(DbBackend::Postgres, "a = $1", vec![1.into()]).sql, "a = $1");
    }
}
