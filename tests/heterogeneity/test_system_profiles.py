import pytest

from lightning_fed.heterogeneity import ClientProfile, load_trace, profiles_from_distribution


def test_exact_share_of_slow_clients_seeded():
    profiles = profiles_from_distribution(10, step_time=2.0, slow_fraction=0.3, slow_factor=10.0, seed=4)
    slow = [c for c, p in enumerate(profiles) if p.step_time == 20.0]
    assert len(slow) == 3 and all(p.step_time in (2.0, 20.0) for p in profiles)
    assert profiles == profiles_from_distribution(10, step_time=2.0, slow_fraction=0.3, slow_factor=10.0, seed=4)
    with pytest.raises(
        ValueError, match=r"^system profile: availability must be in \[0, 1\], got 1.5; system profile: slow"
    ):
        profiles_from_distribution(4, availability=1.5, slow_fraction=2.0)


def test_trace_file(tmp_path):
    trace = tmp_path / "devices.csv"
    trace.write_text("client,step_time,availability,dropout\n1,10,0.5,0.1\n0,1,1,0\n")
    assert load_trace(trace, 2) == [ClientProfile(1.0, 1.0, 0.0), ClientProfile(10.0, 0.5, 0.1)]
    with pytest.raises(ValueError, match=r"no row for client\(s\) \[2\] of data.num_clients=3"):
        load_trace(trace, 3)
    trace.write_text("client,step_time,availability,dropout\n0,1,1,0\n1,-2,1,0\n")
    with pytest.raises(ValueError, match=rf"^trace {trace} line 3: step_time must be > 0, got -2.0$"):
        load_trace(trace, 2)
    trace.write_text("client,step_time\n0,1\n")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['availability', 'dropout'\]"):
        load_trace(trace, 1)
    trace.write_text("client,step_time,availability,dropout\n0,fast,1,0\n")
    with pytest.raises(ValueError, match=rf"^trace {trace} line 2: could not convert string to float: 'fast'$"):
        load_trace(trace, 1)


def test_system_profile_holds_the_eight_arguments_and_names_every_bad_one(tmp_path):
    from lightning_fed.heterogeneity import SystemProfile

    drawn = SystemProfile(local_steps=3, slow_fraction=0.5, seed=4)
    assert drawn.profiles(4) == profiles_from_distribution(4, slow_fraction=0.5, seed=4)
    trace = tmp_path / "trace.csv"
    trace.write_text("client,step_time,availability,dropout\n0,2.0,1.0,0.0\n1,0.5,0.9,0.1\n")
    assert SystemProfile(trace=str(trace)).profiles(2) == [ClientProfile(2.0, 1.0, 0.0), ClientProfile(0.5, 0.9, 0.1)]
    with pytest.raises(ValueError) as info:
        SystemProfile(local_steps=0, dropout=2.0)
    assert str(info.value) == (
        "system profile: local_steps must be in [1, 1000000], got 0; system profile: dropout must be in [0, 1], got 2.0"
    )
