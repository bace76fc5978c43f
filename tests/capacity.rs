//! `plan_capacity`: the inequalities of the module docs, checked directly.
//!
//! With `a` processes, peak `m`, mean `q`, insert time `t` and concurrency `k`, `n` service bits
//! work when
//! - `a <= 2^n` (a service ID each),
//! - `m / a < 2^(32-n)` (counter space for the per-process peak),
//! - `2^n * k / t > q` (the largest fleet keeps up),
//!
//! and a layout has 1 ..= 31 service bits.

use proptest::prelude::*;

use logstamp::id::{CapacityInput, CapacityPlan, plan_capacity};

fn input(processes: u64, peak: f64, mean: f64, insert_seconds: f64, k: u64) -> CapacityInput {
    CapacityInput {
        processes,
        peak_per_second: peak,
        mean_per_second: mean,
        insert_seconds,
        concurrency: k,
    }
}

fn pow2(n: u8) -> f64 {
    2f64.powi(i32::from(n))
}

/// Whether `n` satisfies all three inequalities, in the docs' own form.
fn holds(i: &CapacityInput, n: u8) -> bool {
    let a = i.processes as f64;
    (1..=31).contains(&n)
        && a <= pow2(n)
        && i.peak_per_second / a < pow2(32 - n)
        && pow2(n) * i.concurrency as f64 / i.insert_seconds > i.mean_per_second
}

/// Whether `n` sits on (within rounding of) the boundary of a strict inequality, where f64
/// arithmetic in different orders may disagree.
fn near_tie(i: &CapacityInput, n: u8) -> bool {
    let a = i.processes as f64;
    let close = |x: f64, y: f64| ((x - y) / y).abs() < 1e-9;
    close(i.peak_per_second / a, pow2(32 - n))
        || close(
            i.mean_per_second * i.insert_seconds / i.concurrency as f64,
            pow2(n),
        )
}

fn plan(i: &CapacityInput) -> CapacityPlan {
    plan_capacity(i).unwrap_or_else(|e| panic!("{i:?}: {e}"))
}

/// The smaller headroom at `n`, as a factor.
fn headroom(i: &CapacityInput, n: u8) -> f64 {
    let a = i.processes as f64;
    let need = a.max(i.mean_per_second * i.insert_seconds / i.concurrency as f64);
    (pow2(n) / need).min(pow2(32 - n) / (i.peak_per_second / a))
}

fn check_plan(i: &CapacityInput, p: &CapacityPlan) -> Result<(), TestCaseError> {
    let feasible: Vec<u8> = (1..=31).filter(|&n| holds(i, n)).collect();
    let skip: Vec<u8> = (1..=31).filter(|&n| near_tie(i, n)).collect();
    if p.feasible {
        prop_assert!(p.min_service_bits <= p.max_service_bits);
        prop_assert!((1..=31).contains(&p.min_service_bits));
        prop_assert!((1..=31).contains(&p.max_service_bits));
        for n in 1..=31u8 {
            if skip.contains(&n) {
                continue;
            }
            let inside = (p.min_service_bits..=p.max_service_bits).contains(&n);
            prop_assert_eq!(holds(i, n), inside, "n = {} plan {:?}", n, p);
        }
        let rec = p.recommended_service_bits.unwrap();
        prop_assert!((p.min_service_bits..=p.max_service_bits).contains(&rec));
        prop_assert!(skip.contains(&rec) || holds(i, rec));
        // The recommendation has the most headroom on its tighter side.
        for n in p.min_service_bits..=p.max_service_bits {
            prop_assert!(
                headroom(i, rec) >= headroom(i, n) * (1.0 - 1e-12),
                "n = {} beats {}: {:?}",
                n,
                rec,
                p
            );
        }
        prop_assert_eq!(p.max_processes, Some(1u64 << rec));
        prop_assert_eq!(p.ids_per_second_per_process, Some(1u64 << (32 - rec)));
        let a = i.processes as f64;
        let need = a.max(i.mean_per_second * i.insert_seconds / i.concurrency as f64);
        let service = p.service_headroom.unwrap();
        let counter = p.counter_headroom.unwrap();
        prop_assert!((service - pow2(rec) / need).abs() <= 1e-9 * service);
        prop_assert!((counter - pow2(32 - rec) / (i.peak_per_second / a)).abs() <= 1e-9 * counter);
        prop_assert!(service >= 1.0 - 1e-12 && counter > 1.0 - 1e-12);
        prop_assert!(p.reason.contains(&format!("n = {rec}")), "{}", p.reason);
    } else {
        prop_assert!(
            feasible.iter().all(|n| skip.contains(n)),
            "infeasible, yet {:?} hold: {:?}",
            feasible,
            p
        );
        prop_assert!(p.min_service_bits > p.max_service_bits, "{:?}", p);
        prop_assert_eq!(p.recommended_service_bits, None);
        prop_assert_eq!(p.service_headroom, None);
        prop_assert_eq!(p.counter_headroom, None);
        prop_assert_eq!(p.ids_per_second_per_process, None);
        prop_assert_eq!(p.max_processes, None);
        prop_assert!(!p.reason.is_empty());
    }
    Ok(())
}

fn log_uniform(lo: f64, hi: f64) -> impl Strategy<Value = f64> {
    (lo.log2()..hi.log2()).prop_map(|e| 2f64.powf(e))
}

fn any_input() -> impl Strategy<Value = CapacityInput> {
    (
        prop_oneof![1u64..=64, 1u64..=100_000, 1u64..=(1 << 33)],
        log_uniform(1e-3, 1e11),
        0.0f64..=1.0,
        log_uniform(1e-6, 100.0),
        prop_oneof![1u64..=8, 1u64..=10_000],
    )
        .prop_map(|(a, m, share, t, k)| {
            let q = (m * share).max(m * 1e-9);
            input(a, m, q, t, k)
        })
}

/// Figures whose products are exact in f64: integers and t a multiple of 1/1024.
fn exact_input() -> impl Strategy<Value = CapacityInput> {
    (
        1u64..=(1 << 20),
        1u64..=(1 << 40),
        1u64..=(1 << 40),
        1u64..=(1 << 12),
        1u64..=32,
    )
        .prop_map(|(a, m, q, t_1024, k)| {
            let (m, q) = if q > m { (q, m) } else { (m, q) };
            input(a, m as f64, q as f64, t_1024 as f64 / 1024.0, k)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_feasible_range_is_exactly_where_the_inequalities_hold(i in any_input()) {
        check_plan(&i, &plan(&i))?;
    }

    #[test]
    fn exact_figures_too(i in exact_input()) {
        check_plan(&i, &plan(&i))?;
    }

    /// Raising the load never widens the range.
    #[test]
    fn more_load_never_helps(i in any_input(), factor in 1.0f64..1000.0) {
        let base = plan(&i);
        let heavier = input(
            i.processes,
            i.peak_per_second * factor,
            i.mean_per_second * factor,
            i.insert_seconds,
            i.concurrency,
        );
        let more = plan(&heavier);
        if more.feasible {
            prop_assert!(base.feasible);
            prop_assert!(more.min_service_bits >= base.min_service_bits);
            prop_assert!(more.max_service_bits <= base.max_service_bits);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Ties and examples
// ---------------------------------------------------------------------------------------------

#[test]
fn a_processes_may_fill_2_to_the_n_exactly() {
    // a = 1024 = 2^10 fits 10 bits; 1025 needs 11.
    let p = plan(&input(1024, 1000.0, 10.0, 0.001, 1));
    assert!(p.feasible);
    assert_eq!(p.min_service_bits, 10);
    let p = plan(&input(1025, 1000.0, 10.0, 0.001, 1));
    assert_eq!(p.min_service_bits, 11);
    // One process still needs one bit: a layout has at least one.
    let p = plan(&input(1, 1.0, 1.0, 0.001, 1));
    assert_eq!(p.min_service_bits, 1);
}

#[test]
fn keeping_up_is_strict() {
    // q t / k = 1024 exactly: 2^10 * k / t = 1024 is not > q, so n = 11.
    let p = plan(&input(1, 1024.0, 1024.0, 1.0, 1));
    assert_eq!(p.min_service_bits, 11);
    // Just under 1024: n = 10 keeps up.
    let p = plan(&input(1, 1023.0, 1023.0, 1.0, 1));
    assert_eq!(p.min_service_bits, 10);
    // Concurrency divides the need: q t / k = 2048 * 0.5 / 4 = 256 -> n = 9.
    let p = plan(&input(1, 2048.0, 2048.0, 0.5, 4));
    assert_eq!(p.min_service_bits, 9);
}

#[test]
fn the_counter_bound_is_strict() {
    // One process at 2^22 IDs/s: 2^22 < 2^(32-n) needs n <= 9.
    let p = plan(&input(1, 4_194_304.0, 1.0, 0.001, 1));
    assert_eq!(p.max_service_bits, 9);
    let p = plan(&input(1, 4_194_303.0, 1.0, 0.001, 1));
    assert_eq!(p.max_service_bits, 10);
    // The peak is shared: 8 processes at 2^25 total are 2^22 each.
    let p = plan(&input(8, 33_554_432.0, 1.0, 0.001, 1));
    assert_eq!(p.max_service_bits, 9);
    // A trickle allows every layout up to 31 bits.
    let p = plan(&input(1, 0.5, 0.1, 0.001, 1));
    assert_eq!((p.min_service_bits, p.max_service_bits), (1, 31));
}

#[test]
fn a_typical_fleet_is_balanced() {
    // 64 processes, 1M/s peak, 200k/s mean, 2 ms inserts, 8 in flight per process:
    // a = 64 -> n >= 6; q t / k = 50 -> n >= 6;
    // m / a = 15625 < 2^(32-n) -> n <= 18 (2^14 = 16384).
    let i = input(64, 1_000_000.0, 200_000.0, 0.002, 8);
    let p = plan(&i);
    assert!(p.feasible);
    assert_eq!((p.min_service_bits, p.max_service_bits), (6, 18));
    let rec = p.recommended_service_bits.unwrap();
    // Headroom 2^n / 64 against 2^(32-n) / 15625: balanced near n = 12.
    let best = (6..=18u8)
        .max_by(|&x, &y| headroom(&i, x).total_cmp(&headroom(&i, y)))
        .unwrap();
    assert_eq!(rec, best);
    assert_eq!(best, 12);
}

#[test]
fn among_equal_headrooms_the_one_nearest_10_wins() {
    // One process and a light load: the service side's headroom is 2^n, the counter side's
    // 2^(32-n) / p. With p = 2^j the two balance at n = (32 + j) / 2, a half-integer for odd j,
    // so the two neighbours tie and the one nearer the default 10 is recommended.
    for (j, tied, expected) in [
        (-1, (16, 17), 16),
        (11, (10, 11), 10),
        (13, (9, 10), 10),
        (15, (8, 9), 9),
    ] {
        let p_peak = 2f64.powi(j);
        let i = input(1, p_peak, p_peak.min(1e-3), 1e-3, 1);
        assert_eq!(headroom(&i, tied.0), headroom(&i, tied.1), "j = {j}");
        let p = plan(&i);
        assert_eq!(p.recommended_service_bits, Some(expected), "j = {j}: {p:?}");
    }
    // Away from ties the single best n wins, even far from 10.
    let i = input(1, 2f64.powi(-8), 1e-3, 1e-3, 1);
    let p = plan(&i);
    let rec = p.recommended_service_bits.unwrap();
    assert_eq!(rec, 20, "{p:?}");
    for n in 1..=31u8 {
        assert!(headroom(&i, rec) >= headroom(&i, n), "{n}");
    }
}

// ---------------------------------------------------------------------------------------------
// Infeasible figures
// ---------------------------------------------------------------------------------------------

#[test]
fn too_many_processes_for_any_layout() {
    let a = (1u64 << 31) + 1;
    let p = plan(&input(a, 1e9, 1e6, 0.001, 1));
    assert!(!p.feasible);
    assert!(p.min_service_bits > 31);
    assert!(p.reason.contains("2^31"), "{}", p.reason);
    assert!(p.reason.contains(&a.to_string()), "{}", p.reason);
}

#[test]
fn a_peak_no_counter_can_hold() {
    // 2^31 IDs/s from one process: even 1 service bit leaves 2^31 counter values, not enough.
    let p = plan(&input(1, 2_147_483_648.0, 1.0, 0.001, 1));
    assert!(!p.feasible);
    assert_eq!(p.max_service_bits, 0);
    assert!(p.reason.contains("2147483648"), "{}", p.reason);
    assert!(p.reason.contains("add processes"), "{}", p.reason);
}

#[test]
fn the_conflict_between_fleet_size_and_peak_is_named() {
    // a = 1024 needs n >= 10; a per-process peak of 2^23 needs n <= 8.
    let p = plan(&input(1024, 1024.0 * 8_388_608.0, 1000.0, 0.001, 1));
    assert!(!p.feasible);
    assert_eq!((p.min_service_bits, p.max_service_bits), (10, 8));
    for needle in [
        "at least 10 service bits",
        "at most 8 service bits",
        "1024 processes",
        "8388608",
    ] {
        assert!(p.reason.contains(needle), "{needle:?} not in {}", p.reason);
    }
    // Slow inserts: q t / k = 1000 * 1000 / 1 = 1e6 needs n >= 20 (2^20 > 1e6 > 2^19); a peak of
    // 1.5 * 2^13 per process needs 2^(32-n) > 12288, so n <= 18.
    let p = plan(&input(1, 8192.0 * 1.5, 1e6 / 1e3, 1000.0, 1));
    assert!(!p.feasible);
    assert_eq!((p.min_service_bits, p.max_service_bits), (20, 18));
    assert!(p.reason.contains("q*t/k = 1000000.0"), "{}", p.reason);
}

// ---------------------------------------------------------------------------------------------
// Nonsense figures
// ---------------------------------------------------------------------------------------------

#[test]
fn invalid_figures_are_errors_naming_the_figure() {
    let good = input(4, 100.0, 50.0, 0.01, 2);
    assert!(plan_capacity(&good).is_ok());
    let cases: Vec<(CapacityInput, &str)> = vec![
        (
            CapacityInput {
                processes: 0,
                ..good
            },
            "processes",
        ),
        (
            CapacityInput {
                concurrency: 0,
                ..good
            },
            "concurrency",
        ),
        (
            CapacityInput {
                peak_per_second: -1.0,
                ..good
            },
            "peak",
        ),
        (
            CapacityInput {
                peak_per_second: 0.0,
                ..good
            },
            "peak",
        ),
        (
            CapacityInput {
                peak_per_second: f64::NAN,
                ..good
            },
            "peak",
        ),
        (
            CapacityInput {
                peak_per_second: f64::INFINITY,
                ..good
            },
            "peak",
        ),
        (
            CapacityInput {
                mean_per_second: -5.0,
                ..good
            },
            "mean",
        ),
        (
            CapacityInput {
                mean_per_second: f64::NAN,
                ..good
            },
            "mean",
        ),
        (
            CapacityInput {
                mean_per_second: 0.0,
                ..good
            },
            "mean",
        ),
        (
            CapacityInput {
                insert_seconds: 0.0,
                ..good
            },
            "insert",
        ),
        (
            CapacityInput {
                insert_seconds: -0.01,
                ..good
            },
            "insert",
        ),
        (
            CapacityInput {
                insert_seconds: f64::NAN,
                ..good
            },
            "insert",
        ),
        (
            CapacityInput {
                insert_seconds: f64::NEG_INFINITY,
                ..good
            },
            "insert",
        ),
        (
            CapacityInput {
                mean_per_second: 101.0,
                ..good
            },
            "mean",
        ),
    ];
    for (bad, field) in cases {
        let err = plan_capacity(&bad).expect_err(&format!("{bad:?} accepted"));
        let message = err.to_string();
        assert!(message.contains(field), "{bad:?}: {message}");
    }
    let err = plan_capacity(&CapacityInput {
        mean_per_second: 101.0,
        ..good
    })
    .unwrap_err();
    assert!(err.to_string().contains("exceed peak"), "{err}");
}

#[test]
fn plans_serialize() {
    let p = plan(&input(64, 1_000_000.0, 200_000.0, 0.002, 8));
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["feasible"], true);
    assert_eq!(json["min_service_bits"], 6);
    assert_eq!(json["max_service_bits"], 18);
    assert_eq!(
        json["recommended_service_bits"].as_u64(),
        p.recommended_service_bits.map(u64::from)
    );
    let p = plan(&input(1, 2_147_483_648.0, 1.0, 0.001, 1));
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["feasible"], false);
    assert!(json["recommended_service_bits"].is_null());
}
