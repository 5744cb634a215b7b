//! Patients' contact details: who may set and see them, and what a valid value is.
//!
//! Rules:
//! - **Email** is an RFC 5322 `addr-spec` that a mail server takes as a recipient: ASCII only
//!   (RFC 5322 is ASCII; internationalised addresses need SMTPUTF8, which many servers
//!   refuse), a dot-atom local part (no quoted strings, comments or spaces) of at most 64
//!   characters, a domain name of at least two labels (letters, digits and inner hyphens, 1–63
//!   each, the last not all digits; no IP literals), at most 254 characters in all (RFC 5321's
//!   path limit). No display name. The value must also be one lettre sends to.
//! - **Phone** is E.164: `+`, then 8–15 digits, the first not 0. No spaces or punctuation.
//! - **Locale** is a BCP 47 tag, checked lightly: a 2–3 letter language, then subtags of 1–8
//!   letters or digits joined by `-`, at most 35 characters. It picks the language of the
//!   messages (English for every tag today).
//! - **Writes** change only the fields given: a field left out keeps its value, an explicit
//!   `null` removes it. Values are stored exactly as given (an invalid one is refused, not
//!   repaired).
//! - **Per booker.** What a partner sets is kept for that partner alone: it serves the messages
//!   about the appointments (and waitlist offers) that partner made, and only that partner and
//!   admins read it back. The patient's own details (set by the patient, or by an admin for
//!   it) serve everything else, and a partner's appointments when that partner keeps none. So
//!   a partner can never read, change or redirect what the patient or another partner set.

use chrono::Utc;

use crate::{
    auth::{self, Caller, Role},
    booking::input::parse_id,
    db::{
        contacts::{self, ContactChange, FieldChange},
        entity::patient_contact,
        micros, Db,
    },
    error::{self, Fault, Refusal, ServiceError},
};

/// Longest email address (RFC 5321's 256-octet path, less the angle brackets).
pub const MAX_EMAIL_LEN: usize = 254;
/// Longest locale tag.
pub const MAX_LOCALE_LEN: usize = 35;

/// What a `setPatientContact` request asks for, values not yet checked.
#[derive(Clone, Debug, Default)]
pub struct ContactInput {
    /// The patient, for partners and admins (a patient may name itself).
    pub patient_id: Option<String>,
    /// The email: left out, cleared, or a value.
    pub email: Field,
    /// The phone.
    pub phone: Field,
    /// The locale.
    pub locale: Field,
}

/// One field of a write as sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Field {
    /// Left out: keep what is on file.
    #[default]
    Keep,
    /// An explicit null: remove it.
    Clear,
    /// A value to check and store.
    Set(String),
}

/// A patient's contact details as a caller may see them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contact {
    /// The patient.
    pub patient_id: i64,
    /// The email address.
    pub email: Option<String>,
    /// The phone number.
    pub phone: Option<String>,
    /// The locale.
    pub locale: Option<String>,
}

impl From<patient_contact::Model> for Contact {
    fn from(m: patient_contact::Model) -> Self {
        Self { patient_id: m.patient_id, email: m.email, phone: m.phone, locale: m.locale }
    }
}

/// The answer to a write: the details as the caller may now see them, or every refusal.
pub type ContactOutcome = Result<Result<Contact, Vec<Refusal>>, ServiceError>;

/// Reads and writes patients' contact details under the contract's role rules.
#[derive(Clone, Debug)]
pub struct ContactService {
    db: Db,
}

impl ContactService {
    /// A service on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// `setPatientContact`: a patient's (or an admin's, for the patient) write changes the
    /// patient's own details, a partner's those it keeps for the patient. Sends nothing by
    /// itself: messages follow appointment events only. The answer is what `patientContact`
    /// shows the caller afterwards.
    pub async fn set(&self, caller: &Caller, input: ContactInput) -> ContactOutcome {
        let patient_id = match writer_patient(caller, input.patient_id.as_deref())? {
            Ok(id) => id,
            Err(refusal) => return Ok(Err(vec![refusal])),
        };
        let mut refusals = Vec::new();
        let mut check = |field: Field, named: Fault, rule: fn(&str) -> Result<(), String>| match field {
            Field::Keep => FieldChange::Keep,
            Field::Clear => FieldChange::Clear,
            Field::Set(value) => match rule(&value) {
                Ok(()) => FieldChange::Set(value),
                Err(message) => {
                    refusals.push(Refusal::invalid(named, message));
                    FieldChange::Keep
                }
            },
        };
        let change = ContactChange {
            email: check(input.email, error::Field::Email.in_request(), validate_email),
            phone: check(input.phone, error::Field::Phone.in_request(), validate_phone),
            locale: check(input.locale, error::Field::Locale.in_request(), validate_locale),
        };
        if !refusals.is_empty() {
            return Ok(Err(refusals));
        }
        let booker = booker_of(caller);
        let row =
            contacts::apply(self.db.conn(), patient_id, &booker, &change, &caller.scope(), micros(Utc::now())).await?;
        Ok(Ok(row.into()))
    }

    /// `patientContact`: a patient's own details for the patient itself and for admins; for a
    /// partner, what it keeps for the patient; for an admin naming `partner` (a partner's
    /// token subject), what that partner keeps. `None` when there are none or the caller may
    /// not see them.
    pub async fn get(
        &self,
        caller: &Caller,
        raw_patient_id: Option<&str>,
        partner: Option<&str>,
    ) -> Result<Option<Contact>, ServiceError> {
        let parse = |raw: &str| {
            parse_id(error::Field::PatientId.name(), raw)
                .map_err(|m| ServiceError::invalid(error::Field::PatientId.as_param(), m))
        };
        let patient_id = match caller.role {
            Role::Doctor => return Err(forbidden()),
            Role::Patient => {
                let own = caller.patient_id.ok_or(ServiceError::Unauthenticated)?;
                match raw_patient_id.map(parse).transpose()? {
                    Some(id) if id != own => return Ok(None),
                    _ => own,
                }
            }
            Role::Admin | Role::Partner => match raw_patient_id {
                Some(raw) => parse(raw)?,
                None => {
                    return Err(ServiceError::invalid(
                        error::Field::PatientId.as_param(),
                        "patientId is required for this role",
                    ))
                }
            },
        };
        let booker = match (caller.role, partner) {
            (_, None) => booker_of(caller),
            (Role::Admin, Some(sub)) => partner_booker(sub),
            (Role::Partner, Some(sub)) if sub == caller.sub => booker_of(caller),
            (_, Some(_)) => {
                return Err(ServiceError::Forbidden("only admins read the details another booker keeps".into()))
            }
        };
        Ok(contacts::find(self.db.conn(), patient_id, &booker).await?.map(Contact::from))
    }
}

/// Whose details a caller's writes and reads are: a partner's own, else the patient's.
fn booker_of(caller: &Caller) -> String {
    match caller.role {
        Role::Partner => caller.scope(),
        Role::Patient | Role::Admin | Role::Doctor => contacts::OWN.to_owned(),
    }
}

/// The booker of the details a partner with token subject `sub` keeps: its scope, as stored
/// with the appointments it makes.
fn partner_booker(sub: &str) -> String {
    auth::scope(Role::Partner, sub)
}

fn forbidden() -> ServiceError {
    ServiceError::Forbidden("doctors do not see or set patients' contact details".into())
}

/// The patient a write is for: the booking rules' ([`crate::booking::acting_for`]).
fn writer_patient(caller: &Caller, raw: Option<&str>) -> Result<Result<i64, Refusal>, ServiceError> {
    crate::booking::acting_for(caller, raw, "set patients' contact details")
}

/// Checks an email address by the rules in the module doc.
pub fn validate_email(raw: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("email must be an address such as name@example.org: {why}"));
    if raw.is_empty() {
        return bad("it is empty");
    }
    if raw.len() > MAX_EMAIL_LEN {
        return bad("it is longer than 254 characters");
    }
    if !raw.is_ascii() {
        return bad("only ASCII characters are accepted");
    }
    let Some((local, domain)) = raw.rsplit_once('@') else {
        return bad("it has no @");
    };
    if local.is_empty() || local.len() > 64 {
        return bad("the part before @ must be 1 to 64 characters");
    }
    let atext = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~".contains(&b);
    if local.split('.').any(|atom| atom.is_empty() || !atom.bytes().all(atext)) {
        return bad(
            "the part before @ may hold letters, digits, dots (not first, last or doubled) and !#$%&'*+-/=?^_`{|}~",
        );
    }
    let labels: Vec<&str> = domain.split('.').collect();
    let label_ok = |l: &&str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if labels.len() < 2 || !labels.iter().all(label_ok) {
        return bad("the domain must be a name like example.org");
    }
    if labels.last().is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit())) {
        return bad("the domain must be a name like example.org, not an address");
    }
    // The structural parser of RFC 5322 and the address type the mail is sent with must agree.
    let options = email_address::Options {
        minimum_sub_domains: 2,
        allow_domain_literal: false,
        allow_display_text: false,
        allow_long_local_parts: false,
    };
    if email_address::EmailAddress::parse_with_options(raw, options).is_err() || raw.parse::<lettre::Address>().is_err()
    {
        return bad("it is not a deliverable address");
    }
    Ok(())
}

/// Checks an E.164 phone number: `+`, then 8–15 digits, the first not 0.
pub fn validate_phone(raw: &str) -> Result<(), String> {
    let ok = raw.strip_prefix('+').is_some_and(|digits| {
        (8..=15).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0')
    });
    if ok {
        Ok(())
    } else {
        Err("phone must be an E.164 number: + and 8 to 15 digits, no spaces, e.g. +33612345678".into())
    }
}

/// Checks a locale tag lightly (BCP 47 shape: `en`, `fr-CA`, `zh-Hant-TW`).
pub fn validate_locale(raw: &str) -> Result<(), String> {
    let mut subtags = raw.split('-');
    let language = subtags.next().unwrap_or_default();
    let ok = raw.len() <= MAX_LOCALE_LEN
        && (2..=3).contains(&language.len())
        && language.bytes().all(|b| b.is_ascii_alphabetic())
        && subtags.all(|t| (1..=8).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_alphanumeric()));
    if ok {
        Ok(())
    } else {
        Err("locale must be a BCP 47 language tag such as en, fr-CA or pt-BR".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails() {
        for good in [
            "ada@example.org",
            "a.b+tag@sub.example.co.uk",
            "o'brien@example.ie",
            "x_y-z@xn--bcher-kva.example",
            "UPPER@Example.ORG",
        ] {
            assert_eq!(validate_email(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "plain",
            "@example.org",
            "ada@",
            "ada@localhost",
            "ada@example",
            "Ada <ada@example.org>",
            "\"quoted name\"@example.org",
            "ada..b@example.org",
            ".ada@example.org",
            "ada.@example.org",
            "ada@-example.org",
            "ada@example-.org",
            "ada@exa_mple.org",
            "ada@[127.0.0.1]",
            "ada@127.0.0.1",
            "ada (comment)@example.org",
            " ada@example.org",
            "ada@example.org ",
            "adé@example.org",
            "ada@bücher.example",
            "a@b@example.org",
            "ada@example..org",
        ] {
            assert!(validate_email(bad).is_err(), "{bad:?}");
        }
        assert!(validate_email(&format!("{}@example.org", "a".repeat(65))).is_err());
        assert!(validate_email(&format!("a@{}.org", "b".repeat(64))).is_err());
        let long = format!("{}@{}.{}.{}.org", "a".repeat(64), "b".repeat(63), "c".repeat(63), "d".repeat(59));
        assert!(long.len() > MAX_EMAIL_LEN && validate_email(&long).is_err());
    }

    #[test]
    fn phones() {
        for good in ["+33612345678", "+12025550123", "+861012345678901", "+49301234"] {
            assert_eq!(validate_phone(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "33612345678",
            "+0612345678",
            "+336 12 34 56 78",
            "+33-612345678",
            "+1234567",
            "+1234567890123456",
            "++33612345678",
            "+3361234567a",
        ] {
            assert!(validate_phone(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn locales() {
        for good in ["en", "fr-CA", "pt-BR", "zh-Hant-TW", "de-DE-1996", "ast", "en-x-private"] {
            assert_eq!(validate_locale(good), Ok(()), "{good}");
        }
        for bad in ["", "e", "english", "en_US", "en-", "-en", "fr-CA-", "en-toolongsubtag", "12"] {
            assert!(validate_locale(bad).is_err(), "{bad:?}");
        }
    }
}
