//! The systemd side: the generator that turns the job list into timers
//! (systemd.generator(7): [`generator`], with the unit text from [`render`] and
//! [`unit_name`]'s escaping), what is read from systemd over D-Bus ([`dbus`], [`logind`]'s
//! inhibitors), the journal's structured events ([`journal`]), the credentials a unit
//! passes ([`credential`]), and other schedulers on the host ([`schedulers`]).

pub mod credential;
pub mod dbus;
pub mod generator;
pub mod journal;
pub mod logind;
pub mod render;
pub mod schedulers;
pub mod unit_name;
