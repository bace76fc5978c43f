//! The ID layout: field packing, ranges and limits, for every number of service bits.

use logstamp::id::{IdError, Layout};
use proptest::prelude::*;

fn any_layout() -> impl Strategy<Value = Layout> {
    (1u8..=31, prop_oneof![Just(0u64), 0u64..2_000_000_000])
        .prop_map(|(bits, epoch)| Layout::new(bits, epoch).unwrap())
}

proptest! {
    #[test]
    fn encode_then_decode_gives_the_fields_back(
        layout in any_layout(),
        seconds in 0u64..=u64::from(u32::MAX),
        service in any::<u32>(),
        counter in any::<u32>(),
    ) {
        let service = service & layout.max_service_id();
        let counter = counter & layout.max_counter();
        let unix = layout.epoch_unix_seconds() + seconds;
        let id = layout.encode(unix, service, counter).unwrap();
        let d = layout.decode(id);
        prop_assert_eq!((d.unix_seconds, d.service_id, d.counter), (unix, service, counter));
        // The seconds field is always the top 32 bits.
        prop_assert_eq!(id >> 32, seconds);
    }

    #[test]
    fn decode_then_encode_gives_the_id_back(layout in any_layout(), id in any::<u64>()) {
        let d = layout.decode(id);
        prop_assert_eq!(layout.encode(d.unix_seconds, d.service_id, d.counter).unwrap(), id);
    }

    #[test]
    fn ids_order_by_time_first(
        layout in any_layout(),
        a in 0u64..u64::from(u32::MAX),
        s1 in any::<u32>(), c1 in any::<u32>(), s2 in any::<u32>(), c2 in any::<u32>(),
    ) {
        let e = layout.epoch_unix_seconds();
        let earlier = layout.encode(e + a, s1 & layout.max_service_id(), c1 & layout.max_counter()).unwrap();
        let later = layout.encode(e + a + 1, s2 & layout.max_service_id(), c2 & layout.max_counter()).unwrap();
        prop_assert!(earlier < later);
    }

    #[test]
    fn id_range_holds_exactly_the_ids_of_its_seconds(
        layout in any_layout(),
        from in 0u64..4_000_000_000,
        len in 0u64..100_000,
        probe in 0u64..4_100_000_000,
        service in any::<u32>(),
        counter in any::<u32>(),
    ) {
        let e = layout.epoch_unix_seconds();
        let (from, to) = (e + from, e + from + len);
        prop_assume!(to - e <= u64::from(u32::MAX) && probe <= u64::from(u32::MAX));
        let range = layout.id_range(from as i64, to as i64).unwrap();
        let id = layout
            .encode(e + probe, service & layout.max_service_id(), counter & layout.max_counter())
            .unwrap();
        let inside = (from..to).contains(&(e + probe));
        prop_assert_eq!(range.contains(id), inside);
    }
}

#[test]
fn default_layout_is_ten_service_bits_on_the_unix_epoch() {
    let layout = Layout::default();
    assert_eq!(layout.service_bits(), 10);
    assert_eq!(layout.counter_bits(), 22);
    assert_eq!(layout.max_service_id(), 1023);
    assert_eq!(layout.max_counter(), 4_194_303);
    assert_eq!(layout.epoch_unix_seconds(), 0);
}

#[test]
fn ids_above_i64_max_round_trip_exactly() {
    let layout = Layout::default();
    // 2038-01-19T03:14:08Z is the first second whose IDs pass 2^63.
    let past_2038 = 1u64 << 31;
    let id = layout
        .encode(past_2038, layout.max_service_id(), layout.max_counter())
        .unwrap();
    assert!(id > i64::MAX as u64);
    let d = layout.decode(id);
    assert_eq!(d.unix_seconds, past_2038);
    assert_eq!(d.service_id, 1023);
    assert_eq!(d.counter, 4_194_303);
    assert_eq!(layout.decode(u64::MAX).unix_seconds, u64::from(u32::MAX));
    let range = layout
        .id_range(past_2038 as i64, past_2038 as i64 + 1)
        .unwrap();
    assert_eq!(range.start, 1u64 << 63);
    assert_eq!(
        range.sql_predicate("id"),
        format!("id >= {} AND id < {}", 1u64 << 63, (past_2038 + 1) << 32)
    );
}

#[test]
fn service_bits_outside_1_to_31_are_refused() {
    assert_eq!(Layout::new(0, 0), Err(IdError::ServiceBits(0)));
    assert_eq!(Layout::new(32, 0), Err(IdError::ServiceBits(32)));
    assert!(Layout::new(1, 0).is_ok() && Layout::new(31, 0).is_ok());
}

#[test]
fn an_epoch_whose_seconds_would_overflow_is_refused() {
    let last_ok = u64::MAX - u64::from(u32::MAX);
    assert!(Layout::new(10, last_ok).is_ok());
    assert_eq!(
        Layout::new(10, last_ok + 1),
        Err(IdError::EpochOutOfRange(last_ok + 1))
    );
    assert_eq!(
        Layout::new(10, last_ok)
            .unwrap()
            .decode(u64::MAX)
            .unix_seconds,
        u64::MAX
    );
}

#[test]
fn fields_that_do_not_fit_are_refused_not_masked() {
    let layout = Layout::new(30, 1_000).unwrap();
    assert!(matches!(
        layout.encode(2_000, 1 << 30, 0),
        Err(IdError::ServiceIdOutOfRange { .. })
    ));
    assert!(matches!(
        layout.encode(2_000, 0, 4),
        Err(IdError::CounterOutOfRange { counter: 4, max: 3 })
    ));
    assert!(matches!(
        layout.encode(999, 0, 0),
        Err(IdError::TimeOutOfRange { .. })
    ));
    assert!(matches!(
        layout.encode(1_000 + (1 << 32), 0, 0),
        Err(IdError::TimeOutOfRange { .. })
    ));
}

#[test]
fn custom_epoch_shifts_the_seconds_field() {
    // An epoch of 2020-01-01 keeps the top bit clear until 2088.
    let epoch = 1_577_836_800;
    let layout = Layout::new(10, epoch).unwrap();
    let id = layout.encode(epoch + 86_400, 3, 7).unwrap();
    assert_eq!(id >> 32, 86_400);
    assert_eq!(layout.decode(id).unix_seconds, epoch + 86_400);
    // Times before the epoch hold no IDs: a range starting there starts at 0.
    let range = layout.id_range(0, epoch as i64 + 10).unwrap();
    assert_eq!((range.start, range.end), (0, 10 << 32));
}

#[test]
fn reversed_and_out_of_layout_ranges_are_errors() {
    let layout = Layout::default();
    assert!(matches!(
        layout.id_range(10, 5),
        Err(IdError::ReversedRange { .. })
    ));
    assert!(layout.id_range(0, 1 << 32).is_err());
    assert!(layout.id_range(0, (1 << 32) - 1).is_ok());
}
