//! Unit tests of window shapes: the windows of a row, and rows near the
//! ends of the timestamp range.

use super::*;

const MINUTE: i64 = 60_000_000_000;

fn starts(spec: &WindowSpec, time: i64) -> Vec<i64> {
    spec.windows(time)
        .unwrap()
        .map(|(start, _)| start)
        .collect()
}

#[test]
fn cumulate_windows_share_a_start_and_end_every_step() {
    let spec = WindowSpec {
        kind: WindowKind::Cumulate,
        size_ns: 30 * MINUTE,
        slide_ns: 10 * MINUTE,
        offset_ns: 0,
    };
    let windows: Vec<_> = spec.windows(37 * MINUTE).unwrap().collect();
    assert_eq!(
        windows,
        vec![
            (30 * MINUTE, 40 * MINUTE),
            (30 * MINUTE, 50 * MINUTE),
            (30 * MINUTE, 60 * MINUTE)
        ]
    );
    // A row on a step boundary is not in the window ending there.
    assert_eq!(spec.windows(50 * MINUTE).unwrap().count(), 1);
    assert_eq!(spec.start_of(50 * MINUTE), 30 * MINUTE);
    assert_eq!(spec.start_of(60 * MINUTE), 30 * MINUTE);
    assert_eq!(spec.earliest_open_end(50 * MINUTE), 60 * MINUTE);
    assert_eq!(spec.earliest_open_start(50 * MINUTE), 30 * MINUTE);
}

fn hop(slide: i64, size: i64) -> WindowSpec {
    WindowSpec {
        kind: WindowKind::Hop,
        size_ns: size,
        slide_ns: slide,
        offset_ns: 0,
    }
}

#[test]
fn tumble_windows_align_to_the_epoch_plus_offset() {
    let spec = WindowSpec {
        kind: WindowKind::Tumble,
        size_ns: 5 * MINUTE,
        slide_ns: 5 * MINUTE,
        offset_ns: MINUTE,
    };
    assert_eq!(starts(&spec, 7 * MINUTE), vec![6 * MINUTE]);
    assert_eq!(starts(&spec, 6 * MINUTE), vec![6 * MINUTE]);
    assert_eq!(starts(&spec, -MINUTE), vec![-4 * MINUTE]);
}

#[test]
fn hop_rows_fall_in_size_over_slide_windows() {
    let spec = hop(MINUTE, 5 * MINUTE);
    let first = starts(&spec, 7 * MINUTE + 1);
    assert_eq!(first, (3..=7).map(|m| m * MINUTE).collect::<Vec<_>>());
    // A size that is not a multiple of the slide.
    let spec = hop(2 * MINUTE, 5 * MINUTE);
    let second = starts(&spec, 7 * MINUTE);
    assert_eq!(second, vec![4 * MINUTE, 6 * MINUTE]);
    for start in second {
        assert!(start <= 7 * MINUTE && 7 * MINUTE < start + 5 * MINUTE);
    }
}

#[test]
fn earliest_open_window_is_the_first_ending_after_the_watermark() {
    let spec = hop(MINUTE, 5 * MINUTE);
    assert_eq!(spec.earliest_open_start(10 * MINUTE), 6 * MINUTE);
    assert_eq!(spec.earliest_open_start(10 * MINUTE + 1), 6 * MINUTE);
    let tumble = WindowSpec {
        kind: WindowKind::Tumble,
        size_ns: 5 * MINUTE,
        slide_ns: 5 * MINUTE,
        offset_ns: 0,
    };
    assert_eq!(tumble.earliest_open_start(10 * MINUTE), 10 * MINUTE);
    assert_eq!(tumble.earliest_open_start(9 * MINUTE), 5 * MINUTE);
    assert_eq!(describe_duration(5 * MINUTE), "5m");
}

fn tumble(size: i64) -> WindowSpec {
    WindowSpec {
        kind: WindowKind::Tumble,
        size_ns: size,
        slide_ns: size,
        offset_ns: 0,
    }
}

const SECOND: i64 = 1_000_000_000;

#[test]
fn a_window_past_the_latest_timestamp_is_an_error_not_a_wrap() {
    // 2262-04-11 23:47:16.5: its 1-second window would end at 23:47:17.
    let late = i64::MAX - 354_775_807;
    let error = tumble(SECOND).windows(late).unwrap_err();
    assert_eq!(error.code, sqlstate::DATETIME_FIELD_OVERFLOW);
    assert!(
        error
            .message
            .contains("ends after 2262-04-11 23:47:16.854775807"),
        "{}",
        error.message
    );
    assert!(
        error
            .message
            .contains("window of 2262-04-11 23:47:16.5 ends"),
        "{}",
        error.message
    );
    assert!(error.hint.is_some());
    for spec in [
        hop(SECOND, 5 * SECOND),
        cumulate(SECOND, 5 * SECOND),
        session(SECOND),
    ] {
        let error = spec.windows(late).unwrap_err();
        assert_eq!(error.code, sqlstate::DATETIME_FIELD_OVERFLOW, "{spec:?}");
    }
    // The last whole second before the limit still has its window.
    let fits = tumble(SECOND)
        .windows(late - SECOND)
        .unwrap()
        .collect::<Vec<_>>();
    assert_eq!(fits.len(), 1);
    assert!(fits[0].0 < fits[0].1);
}

#[test]
fn a_window_before_the_earliest_timestamp_is_an_error() {
    let early = i64::MIN + 1;
    for spec in [
        tumble(SECOND),
        hop(SECOND, 5 * SECOND),
        cumulate(SECOND, 5 * SECOND),
    ] {
        let error = spec.windows(early).unwrap_err();
        assert_eq!(error.code, sqlstate::DATETIME_FIELD_OVERFLOW, "{spec:?}");
        assert!(
            error.message.contains("starts before 1677-09-21"),
            "{}",
            error.message
        );
    }
    // A session starts at its row: fine.
    let windows: Vec<_> = session(SECOND).windows(early).unwrap().collect();
    assert_eq!(windows, vec![(early, early + SECOND)]);
}

#[test]
fn every_window_a_row_gets_is_well_formed_near_the_limits() {
    let specs = [
        tumble(SECOND),
        hop(SECOND, 5 * SECOND),
        cumulate(SECOND, 5 * SECOND),
        session(SECOND),
    ];
    let times = [
        i64::MIN,
        i64::MIN + 7 * SECOND,
        -1,
        0,
        i64::MAX - 7 * SECOND,
        i64::MAX,
    ];
    for spec in specs {
        for time in times {
            let Ok(windows) = spec.windows(time) else {
                continue;
            };
            let windows: Vec<_> = windows.collect();
            assert!(!windows.is_empty() && windows.len() <= 5, "{spec:?} {time}");
            for (start, end) in windows {
                assert!(
                    start <= time && time < end,
                    "{spec:?} {time}: [{start}, {end})"
                );
            }
        }
    }
}

#[test]
fn watermark_bounds_clamp_at_the_limits() {
    let spec = hop(SECOND, 5 * SECOND);
    assert_eq!(spec.earliest_open_start(i64::MIN), i64::MIN);
    assert_eq!(spec.earliest_open_end(i64::MAX), i64::MAX);
    assert_eq!(
        cumulate(SECOND, 5 * SECOND).earliest_open_end(i64::MAX),
        i64::MAX
    );
}

#[test]
fn shapes_that_cannot_run_are_refused() {
    assert!(hop(SECOND, 5 * SECOND).validate().is_ok());
    let error = hop(1, 20_000).validate().unwrap_err();
    assert_eq!(error.code, sqlstate::INVALID_PARAMETER_VALUE);
    assert!(error.message.contains("more than 10000 windows per row"));
    assert!(cumulate(1, 20_000).validate().is_err());
    assert!(tumble(0).validate().is_err());
    assert!(hop(-1, 5).validate().is_err());
    assert!(cumulate(2, 5).validate().is_err());
}

fn cumulate(step: i64, size: i64) -> WindowSpec {
    WindowSpec {
        kind: WindowKind::Cumulate,
        size_ns: size,
        slide_ns: step,
        offset_ns: 0,
    }
}

fn session(gap: i64) -> WindowSpec {
    WindowSpec {
        kind: WindowKind::Session,
        size_ns: gap,
        slide_ns: gap,
        offset_ns: 0,
    }
}
