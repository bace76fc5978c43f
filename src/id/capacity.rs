//! Choosing the number of service bits `n` for a fleet (the brief's capacity formula).
//!
//! With `a` processes, peak `m` and mean `q` messages per second, mean insert time `t` seconds
//! per message and insert concurrency `k` per process:
//! - every process needs its own service ID: `a <= 2^n`;
//! - one process stamps at most `2^(32-n)` IDs per second: `m / a < 2^(32-n)`;
//! - the largest fleet the layout allows must keep up: `2^n * k / t > q`.
//!
//! So `max(log2 a, log2(q t / k)) < n < 32 - log2(m / a)`. The recommendation is the `n` that
//! leaves the most headroom on its tighter side.

use serde::Serialize;

/// The fleet's figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CapacityInput {
    pub processes: u64,
    pub peak_per_second: f64,
    pub mean_per_second: f64,
    pub insert_seconds: f64,
    pub concurrency: u64,
}

/// The outcome: the feasible range of `n`, a recommendation with its headroom, or why none fits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityPlan {
    pub feasible: bool,
    /// Smallest `n` that satisfies the service-ID and throughput constraints.
    pub min_service_bits: u8,
    /// Largest `n` that leaves each process enough counter space for the peak.
    pub max_service_bits: u8,
    pub recommended_service_bits: Option<u8>,
    /// At the recommended `n`: how many times `a` (or `q t / k`) fits in `2^n`.
    pub service_headroom: Option<f64>,
    /// At the recommended `n`: how many times the per-process peak fits in `2^(32-n)`.
    pub counter_headroom: Option<f64>,
    pub ids_per_second_per_process: Option<u64>,
    pub max_processes: Option<u64>,
    pub reason: String,
}

/// Why the figures cannot be planned with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CapacityInputError(String);

impl CapacityInput {
    fn validate(&self) -> Result<(), CapacityInputError> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(CapacityInputError(format!(
                    "{name} must be a positive number, got {v}"
                )))
            }
        };
        if self.processes == 0 {
            return Err(CapacityInputError("processes must be at least 1".into()));
        }
        if self.concurrency == 0 {
            return Err(CapacityInputError("concurrency must be at least 1".into()));
        }
        positive("peak", self.peak_per_second)?;
        positive("mean", self.mean_per_second)?;
        positive("insert-seconds", self.insert_seconds)?;
        if self.mean_per_second > self.peak_per_second {
            return Err(CapacityInputError(format!(
                "mean ({}) cannot exceed peak ({})",
                self.mean_per_second, self.peak_per_second
            )));
        }
        Ok(())
    }
}

/// Plans `n` for the fleet; errors only on figures that make no sense.
pub fn plan_capacity(input: &CapacityInput) -> Result<CapacityPlan, CapacityInputError> {
    input.validate()?;
    let a = input.processes as f64;
    let per_process_peak = input.peak_per_second / a;
    // Fleet demand in "processes' worth" of insert capacity: q * t / k.
    let needed_inserters = input.mean_per_second * input.insert_seconds / input.concurrency as f64;
    let service_need = a.max(needed_inserters);

    // n >= log2(a) (a == 2^n is allowed) and n > log2(q t / k) (strict).
    let min_for_processes = a.log2().ceil();
    let min_for_throughput = needed_inserters.log2().floor() + 1.0;
    let min_bits = min_for_processes.max(min_for_throughput).max(1.0);
    // m / a < 2^(32-n)  <=>  n < 32 - log2(m / a).
    let max_bits = ((32.0 - per_process_peak.log2()).ceil() - 1.0).min(31.0);

    let clamp = |v: f64| v.clamp(0.0, 32.0) as u8;
    let (min_service_bits, max_service_bits) = (clamp(min_bits), clamp(max_bits));

    if min_bits > max_bits {
        let reason = if min_bits > 31.0 {
            format!(
                "the fleet needs more than 2^31 service IDs ({} processes, {:.0} inserters' \
                 worth of load), more than any layout has",
                input.processes, needed_inserters
            )
        } else if max_bits < 1.0 {
            format!(
                "each process would stamp {per_process_peak:.0} IDs/s at peak, more than even \
                 31 counter bits (2,147,483,648/s) allow: add processes"
            )
        } else {
            format!(
                "the fleet needs at least {min_service_bits} service bits ({} processes, and \
                 q*t/k = {needed_inserters:.1} to keep up), but the per-process peak of \
                 {per_process_peak:.0} IDs/s needs more than 2^(32-n) counter values, so at most \
                 {max_service_bits} service bits: add processes to spread the peak, or raise \
                 insert concurrency",
                input.processes
            )
        };
        return Ok(CapacityPlan {
            feasible: false,
            min_service_bits,
            max_service_bits,
            recommended_service_bits: None,
            service_headroom: None,
            counter_headroom: None,
            ids_per_second_per_process: None,
            max_processes: None,
            reason,
        });
    }

    // The headroom on each side is 2^(margin bits); pick n maximising the smaller margin, and
    // among equals the default layout's 10 or the one nearest it.
    let margin = |n: u8| {
        let service = f64::from(n) - service_need.log2();
        let counter = f64::from(32 - n) - per_process_peak.log2();
        service.min(counter)
    };
    let recommended = (min_service_bits..=max_service_bits)
        .max_by(|&x, &y| {
            margin(x)
                .total_cmp(&margin(y))
                .then_with(|| y.abs_diff(10).cmp(&x.abs_diff(10)))
        })
        .unwrap_or(min_service_bits);
    let service_headroom = 2f64.powi(i32::from(recommended)) / service_need;
    let ids_per_second = 1u64 << (32 - recommended);
    let counter_headroom = ids_per_second as f64 / per_process_peak;
    let reason = format!(
        "n = {recommended}: up to {} processes ({service_headroom:.1}x the need), \
         {ids_per_second} IDs/s per process ({counter_headroom:.1}x the per-process peak of \
         {per_process_peak:.0}/s)",
        1u64 << recommended
    );
    Ok(CapacityPlan {
        feasible: true,
        min_service_bits,
        max_service_bits,
        recommended_service_bits: Some(recommended),
        service_headroom: Some(service_headroom),
        counter_headroom: Some(counter_headroom),
        ids_per_second_per_process: Some(ids_per_second),
        max_processes: Some(1u64 << recommended),
        reason,
    })
}
